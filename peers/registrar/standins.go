// Test-only stand-ins for three containers of csi-driver-host-path's plugin pod whose sources the
// Go module proxy does not serve: node-driver-registrar, livenessprobe and
// csi-external-health-monitor-controller. The same binary is each of them when called by that
// image's entrypoint name (see standinFor). They take the flags the driver's manifest passes and
// do the part of the job a test cluster depends on; they are not those programs.
//
//	csi-node-driver-registrar  asks the driver its name (GetPluginInfo), serves kubelet's
//	                           registration socket <plugin-registration-path>/<name>-reg.sock
//	                           naming --kubelet-registration-path, and answers /healthz on
//	                           --http-endpoint once kubelet has accepted the driver
//	livenessprobe              answers /healthz on --health-port with the driver's Probe
//	csi-external-health-monitor-controller
//	                           checks the driver answers, then idles (no volume health events)
package main

import (
	"context"
	"flag"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	csi "github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	registration "k8s.io/kubelet/pkg/apis/pluginregistration/v1"
)

// standinFor returns the stand-in named by the program's file name, or nil for the registrar's
// own command line (main.go).
func standinFor(program string) func(args []string) int {
	standin := standinByName(filepath.Base(program))
	if standin == nil {
		return nil
	}
	return func(args []string) int {
		// As the sidecars: SIGTERM ends the container at once, not after the grace period.
		stop := make(chan os.Signal, 1)
		signal.Notify(stop, syscall.SIGTERM, syscall.SIGINT)
		go func() {
			<-stop
			logf("stopping on a signal")
			os.Exit(0)
		}()
		return standin(args)
	}
}

func standinByName(name string) func(args []string) int {
	switch name {
	case "csi-node-driver-registrar":
		return nodeDriverRegistrar
	case "livenessprobe":
		return livenessProbe
	case "csi-external-health-monitor-controller":
		return healthMonitor
	}
	return nil
}

// logf writes one line to standard error, which the container runtime keeps as the log.
func logf(format string, args ...any) {
	fmt.Fprintf(os.Stderr, time.Now().UTC().Format(time.RFC3339)+" "+format+"\n", args...)
}

// dialDriver connects to the driver's socket; a bare path is a unix socket, as the sidecars
// take it.
func dialDriver(address string) (*grpc.ClientConn, error) {
	target := address
	if !strings.HasPrefix(target, "unix://") {
		target = "unix://" + target
	}
	return grpc.NewClient(target, grpc.WithTransportCredentials(insecure.NewCredentials()))
}

// driverName asks the driver its name, retrying until it answers (the driver's container may
// start after this one) or the timeout passes.
func driverName(conn *grpc.ClientConn, timeout time.Duration) (string, error) {
	deadline := time.Now().Add(timeout)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		info, err := csi.NewIdentityClient(conn).GetPluginInfo(ctx, &csi.GetPluginInfoRequest{})
		cancel()
		if err == nil {
			return info.GetName(), nil
		}
		if time.Now().After(deadline) {
			return "", err
		}
		logf("waiting for the driver: %v", err)
		time.Sleep(time.Second)
	}
}

// listenAddress turns ":9809" or "9809" into a listen address.
func listenAddress(endpoint string) string {
	if strings.Contains(endpoint, ":") {
		return endpoint
	}
	return ":" + endpoint
}

func serveHealth(address string, healthy func() error) {
	mux := http.NewServeMux()
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) {
		if err := healthy(); err != nil {
			w.WriteHeader(http.StatusInternalServerError)
			_, _ = w.Write([]byte(err.Error()))
			return
		}
		_, _ = w.Write([]byte("ok"))
	})
	go func() {
		if err := http.ListenAndServe(listenAddress(address), mux); err != nil {
			logf("health endpoint %s: %v", address, err)
			os.Exit(1)
		}
	}()
}

type kubeletRegistration struct {
	registration.UnimplementedRegistrationServer
	name, endpoint string
	registered     atomic.Bool
}

func (r *kubeletRegistration) GetInfo(context.Context, *registration.InfoRequest) (*registration.PluginInfo, error) {
	return &registration.PluginInfo{
		Type:              registration.CSIPlugin,
		Name:              r.name,
		Endpoint:          r.endpoint,
		SupportedVersions: []string{"1.0.0"},
	}, nil
}

func (r *kubeletRegistration) NotifyRegistrationStatus(_ context.Context, status *registration.RegistrationStatus) (*registration.RegistrationStatusResponse, error) {
	if !status.PluginRegistered {
		// As node-driver-registrar: a refused registration ends the container, so that its
		// restarts show.
		logf("kubelet refused the registration of %s: %s", r.name, status.Error)
		os.Exit(1)
	}
	r.registered.Store(true)
	logf("kubelet registered driver %s at %s", r.name, r.endpoint)
	return &registration.RegistrationStatusResponse{}, nil
}

func nodeDriverRegistrar(args []string) int {
	flags := flag.NewFlagSet("csi-node-driver-registrar", flag.ContinueOnError)
	address := flags.String("csi-address", "/run/csi/socket", "the driver's socket inside this container")
	kubeletPath := flags.String("kubelet-registration-path", "", "the driver's socket as kubelet sees it on the node")
	registry := flags.String("plugin-registration-path", "/registration", "kubelet's plugins_registry inside this container")
	endpoint := flags.String("http-endpoint", "", "where /healthz is served")
	timeout := flags.Duration("timeout", time.Minute, "how long to wait for the driver")
	flags.Int("v", 0, "log level (accepted, not used)")
	if err := flags.Parse(args); err != nil {
		return 2
	}
	if *kubeletPath == "" {
		logf("--kubelet-registration-path is required")
		return 2
	}
	logf("test-only stand-in for node-driver-registrar")
	conn, err := dialDriver(*address)
	if err != nil {
		logf("cannot dial %s: %v", *address, err)
		return 1
	}
	name, err := driverName(conn, *timeout)
	_ = conn.Close()
	if err != nil {
		logf("the driver at %s did not say its name: %v", *address, err)
		return 1
	}
	server := &kubeletRegistration{name: name, endpoint: *kubeletPath}
	if *endpoint != "" {
		serveHealth(*endpoint, func() error {
			if !server.registered.Load() {
				return fmt.Errorf("driver %s not registered with kubelet yet", name)
			}
			return nil
		})
	}
	socket := filepath.Join(*registry, name+"-reg.sock")
	_ = os.Remove(socket)
	listener, err := net.Listen("unix", socket)
	if err != nil {
		logf("cannot listen on %s: %v", socket, err)
		return 1
	}
	grpcServer := grpc.NewServer()
	registration.RegisterRegistrationServer(grpcServer, server)
	logf("serving %s for driver %s", socket, name)
	if err := grpcServer.Serve(listener); err != nil {
		logf("serve: %v", err)
		return 1
	}
	return 0
}

func livenessProbe(args []string) int {
	flags := flag.NewFlagSet("livenessprobe", flag.ContinueOnError)
	address := flags.String("csi-address", "/run/csi/socket", "the driver's socket inside this container")
	port := flags.String("health-port", "9808", "the port /healthz is served on")
	endpoint := flags.String("http-endpoint", "", "where /healthz is served (instead of --health-port)")
	timeout := flags.Duration("probe-timeout", time.Second, "how long one Probe may take")
	flags.Int("v", 0, "log level (accepted, not used)")
	if err := flags.Parse(args); err != nil {
		return 2
	}
	logf("test-only stand-in for livenessprobe")
	conn, err := dialDriver(*address)
	if err != nil {
		logf("cannot dial %s: %v", *address, err)
		return 1
	}
	listen := *endpoint
	if listen == "" {
		listen = ":" + *port
	}
	serveHealth(listen, func() error {
		ctx, cancel := context.WithTimeout(context.Background(), *timeout)
		defer cancel()
		answer, err := csi.NewIdentityClient(conn).Probe(ctx, &csi.ProbeRequest{})
		if err != nil {
			logf("health check failed: %v", err)
			return err
		}
		if ready := answer.GetReady(); ready != nil && !ready.GetValue() {
			logf("health check failed: the driver is not ready")
			return fmt.Errorf("driver not ready")
		}
		return nil
	})
	select {}
}

func healthMonitor(args []string) int {
	flags := flag.NewFlagSet("csi-external-health-monitor-controller", flag.ContinueOnError)
	address := flags.String("csi-address", "/run/csi/socket", "the driver's socket inside this container")
	flags.Bool("leader-election", false, "accepted, not used")
	flags.Int("v", 0, "log level (accepted, not used)")
	if err := flags.Parse(args); err != nil {
		return 2
	}
	logf("test-only stand-in for csi-external-health-monitor-controller: it reports no volume health")
	conn, err := dialDriver(*address)
	if err != nil {
		logf("cannot dial %s: %v", *address, err)
		return 1
	}
	name, err := driverName(conn, time.Minute)
	if err != nil {
		logf("the driver at %s did not answer: %v", *address, err)
		return 1
	}
	logf("driver %s answers; idling", name)
	select {}
}
