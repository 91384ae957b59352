// csi-pv-registrar announces a CSI driver to kubelet, the one job of node-driver-registrar that
// the test node needs (node-driver-registrar itself is not served by the Go module proxy). It
// serves kubelet's plugin registration API on a socket in kubelet's plugins_registry folder:
// GetInfo names the driver and its Node service's socket, and kubelet's verdict is printed as
// one line, "registered" or "refused: <reason>", which the tests read.
//
// It is in Go, not in the Rust test support, because kubelet dials the socket with its path as
// the HTTP/2 :authority, which the Rust HTTP/2 server (h2) refuses as malformed.
package main

import (
	"context"
	"flag"
	"fmt"
	"net"
	"os"
	"os/signal"
	"syscall"

	"google.golang.org/grpc"
	registration "k8s.io/kubelet/pkg/apis/pluginregistration/v1"
)

type registrar struct {
	registration.UnimplementedRegistrationServer
	driver   string
	endpoint string
	versions []string
}

func (r *registrar) GetInfo(context.Context, *registration.InfoRequest) (*registration.PluginInfo, error) {
	return &registration.PluginInfo{
		Type:              registration.CSIPlugin,
		Name:              r.driver,
		Endpoint:          r.endpoint,
		SupportedVersions: r.versions,
	}, nil
}

func (r *registrar) NotifyRegistrationStatus(_ context.Context, status *registration.RegistrationStatus) (*registration.RegistrationStatusResponse, error) {
	if status.PluginRegistered {
		fmt.Println("registered")
	} else {
		fmt.Printf("refused: %s\n", status.Error)
	}
	return &registration.RegistrationStatusResponse{}, nil
}

func main() {
	if standin := standinFor(os.Args[0]); standin != nil {
		os.Exit(standin(os.Args[1:]))
	}
	socket := flag.String("socket", "", "where kubelet finds the registrar: <kubelet root>/plugins_registry/<name>.sock")
	driver := flag.String("driver", "", "the CSI driver's name")
	endpoint := flag.String("endpoint", "", "the path of the driver's socket, which kubelet dials for the Node service")
	flag.Parse()
	if *socket == "" || *driver == "" || *endpoint == "" {
		fmt.Fprintln(os.Stderr, "usage: csi-pv-registrar --socket PATH --driver NAME --endpoint PATH")
		os.Exit(2)
	}
	_ = os.Remove(*socket)
	listener, err := net.Listen("unix", *socket)
	if err != nil {
		fmt.Fprintf(os.Stderr, "cannot listen on %s: %v\n", *socket, err)
		os.Exit(1)
	}
	server := grpc.NewServer()
	registration.RegisterRegistrationServer(server, &registrar{driver: *driver, endpoint: *endpoint, versions: []string{"1.0.0"}})
	stop := make(chan os.Signal, 1)
	signal.Notify(stop, syscall.SIGTERM, syscall.SIGINT)
	go func() {
		<-stop
		server.Stop()
	}()
	fmt.Printf("serving %s for driver %s at %s\n", *socket, *driver, *endpoint)
	if err := server.Serve(listener); err != nil {
		fmt.Fprintf(os.Stderr, "serve: %v\n", err)
	}
	_ = os.Remove(*socket)
}
