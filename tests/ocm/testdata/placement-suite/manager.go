// Our replacement for upstream's pkg/placement/controllers/manager.go, given to `go test` with
// -overlay by tests/ocm/placement-suite.sh: upstream's placement integration specs call
// RunControllerManager to start the controller in-process; this one starts our
// placement-scheduler binary (the path in $OCM_PLACEMENT_SCHEDULER) against the same apiserver
// instead, and stops it when the spec's context ends. No upstream file is copied or edited.
package hub

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/openshift/library-go/pkg/controller/controllercmd"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// RunControllerManager has upstream's signature: it runs the scheduler until ctx ends.
func RunControllerManager(ctx context.Context, controllerContext *controllercmd.ControllerContext) error {
	// Upstream's specs serve no debug endpoint from RunControllerManager (no Server).
	done, err := StartPlacementScheduler(ctx, controllerContext.KubeConfig, "--debug-bind-address=")
	if err != nil {
		// Upstream's specs start this in a goroutine and drop the error: say it where the
		// suite's output shows it, so a harness problem is not mistaken for a failed spec.
		fmt.Fprintf(os.Stderr, "placement-suite overlay: %v\n", err)
		return err
	}
	<-done
	return nil
}

var started atomic.Int64

// StartPlacementScheduler starts `placement-scheduler controller` against the apiserver of
// cfg, with the given extra flags, and stops it (SIGTERM, then SIGKILL after 10 s) when ctx
// ends; the returned channel closes once the process has exited. Its output goes to
// $OCM_PLACEMENT_SUITE_LOGS/scheduler-<n>.log when that is set, else to stderr.
func StartPlacementScheduler(ctx context.Context, cfg *rest.Config, extraArgs ...string) (<-chan struct{}, error) {
	bin := os.Getenv("OCM_PLACEMENT_SCHEDULER")
	if bin == "" {
		return nil, fmt.Errorf("OCM_PLACEMENT_SCHEDULER is not set: it must name the placement-scheduler binary to test")
	}
	n := started.Add(1)
	dir, err := os.MkdirTemp("", "placement-suite-")
	if err != nil {
		return nil, err
	}
	kubeconfig := filepath.Join(dir, "kubeconfig")
	if err := writeKubeconfig(cfg, kubeconfig); err != nil {
		return nil, err
	}
	args := append([]string{
		"controller",
		"--kubeconfig", kubeconfig,
		// One process per spec, as upstream's in-process controller: nothing to elect.
		"--leader-elect=false",
		"--metrics-bind-address", "127.0.0.1:0",
	}, extraArgs...)
	cmd := exec.Command(bin, args...)
	out := os.Stderr
	if logs := os.Getenv("OCM_PLACEMENT_SUITE_LOGS"); logs != "" {
		f, err := os.Create(filepath.Join(logs, fmt.Sprintf("scheduler-%03d.log", n)))
		if err != nil {
			return nil, err
		}
		fmt.Fprintf(f, "# %s %v\n", bin, args)
		out = f
	}
	cmd.Stdout, cmd.Stderr = out, out
	// Killed with the suite if the suite itself dies.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("starting %s: %w", bin, err)
	}
	exited := make(chan struct{})
	go func() {
		_ = cmd.Wait()
		if out != os.Stderr {
			_ = out.Close()
		}
		_ = os.RemoveAll(dir)
		close(exited)
	}()
	go func() {
		select {
		case <-exited:
			return
		case <-ctx.Done():
		}
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(10 * time.Second):
			_ = cmd.Process.Kill()
		}
	}()
	return exited, nil
}

// writeKubeconfig writes cfg (envtest's admin: a client certificate) as a kubeconfig file.
func writeKubeconfig(cfg *rest.Config, path string) error {
	kc := clientcmdapi.NewConfig()
	kc.Clusters["envtest"] = &clientcmdapi.Cluster{
		Server:                   cfg.Host,
		CertificateAuthority:     cfg.CAFile,
		CertificateAuthorityData: cfg.CAData,
		InsecureSkipTLSVerify:    cfg.Insecure,
	}
	kc.AuthInfos["envtest"] = &clientcmdapi.AuthInfo{
		ClientCertificate:     cfg.CertFile,
		ClientCertificateData: cfg.CertData,
		ClientKey:             cfg.KeyFile,
		ClientKeyData:         cfg.KeyData,
		Token:                 cfg.BearerToken,
		Username:              cfg.Username,
		Password:              cfg.Password,
	}
	kc.Contexts["envtest"] = &clientcmdapi.Context{Cluster: "envtest", AuthInfo: "envtest"}
	kc.CurrentContext = "envtest"
	return clientcmd.WriteToFile(*kc, path)
}
