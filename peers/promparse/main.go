// promparse reads a metrics exposition on stdin with the parser Prometheus' scrape loop uses
// (model/textparse), picked by the Content-Type given as the only argument, and prints what
// the server would store: one line per series with its whole label set as parsed (le and
// quantile as written), and one line per family type. A parse error exits 1 with the error.
package main

import (
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/model/textparse"
)

func main() {
	if len(os.Args) != 2 {
		fmt.Fprintln(os.Stderr, "usage: promparse CONTENT-TYPE < exposition")
		os.Exit(2)
	}
	body, err := io.ReadAll(os.Stdin)
	if err != nil {
		fmt.Fprintln(os.Stderr, "promparse: reading stdin:", err)
		os.Exit(1)
	}
	parser, err := textparse.New(body, os.Args[1], false, labels.NewSymbolTable())
	if err != nil {
		fmt.Fprintln(os.Stderr, "promparse: content type:", err)
		os.Exit(1)
	}
	var series labels.Labels
	for {
		entry, err := parser.Next()
		if errors.Is(err, io.EOF) {
			return
		}
		if err != nil {
			fmt.Fprintln(os.Stderr, "promparse:", err)
			os.Exit(1)
		}
		switch entry {
		case textparse.EntryType:
			name, kind := parser.Type()
			fmt.Printf("type %s %s\n", name, kind)
		case textparse.EntrySeries:
			parser.Metric(&series)
			fmt.Printf("series %s\n", series.String())
		}
	}
}
