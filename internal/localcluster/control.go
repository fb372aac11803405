package localcluster

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"strings"
	"time"
)

// Control actions of the up process, the path of their request on the control socket.
const (
	ActionNodeStop         = "node/stop"         // name=NODE
	ActionNodeStart        = "node/start"        // name=NODE
	ActionKillPod          = "pod/kill"          // namespace=NS&name=POD
	ActionOperatorStop     = "operator/stop"     //
	ActionOperatorStart    = "operator/start"    //
	ActionAPIServerRestart = "apiserver/restart" //
	ActionNetFault         = "net/fault"         // node=NODE&fault=partition|inbound|latency|heal&delay=DURATION
)

// Controller carries out the control actions.
type Controller interface {
	StopNode(name string) error
	StartNode(name string) error
	KillPod(namespace, name string) error
	StopOperator() error
	StartOperator(env []string) error
	RestartAPIServer() error
	NetFault(node, fault string, delay time.Duration) error
}

// maxSocketPath is the longest path a Unix socket address holds (sun_path, less the NUL).
const maxSocketPath = 107

// ListenControl creates the control socket at path, replacing a stale one. Only the owner may
// connect: the actions kill processes.
func ListenControl(path string) (net.Listener, error) {
	if len(path) > maxSocketPath {
		return nil, fmt.Errorf("control socket path %s is longer than %d bytes: use a shorter --dir", path, maxSocketPath)
	}
	if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("failed to remove stale control socket: %w", err)
	}
	l, err := net.Listen("unix", path)
	if err != nil {
		return nil, fmt.Errorf("failed to listen on the control socket: %w", err)
	}
	if err := os.Chmod(path, 0o600); err != nil {
		l.Close()
		return nil, fmt.Errorf("failed to restrict the control socket: %w", err)
	}
	return l, nil
}

// ServeControl answers control requests on l until ctx ends: POST /<action>?<params>, answered
// with 200 when the action is done, or an error status and the error's text.
func ServeControl(ctx context.Context, l net.Listener, c Controller) error {
	mux := http.NewServeMux()
	handle := func(action string, do func(q url.Values) error) {
		mux.HandleFunc("POST /"+action, func(w http.ResponseWriter, r *http.Request) {
			if err := do(r.URL.Query()); err != nil {
				http.Error(w, err.Error(), http.StatusConflict)
				return
			}
			fmt.Fprintln(w, "ok")
		})
	}
	handle(ActionNodeStop, func(q url.Values) error { return c.StopNode(q.Get("name")) })
	handle(ActionNodeStart, func(q url.Values) error { return c.StartNode(q.Get("name")) })
	handle(ActionKillPod, func(q url.Values) error { return c.KillPod(q.Get("namespace"), q.Get("name")) })
	handle(ActionOperatorStop, func(url.Values) error { return c.StopOperator() })
	handle(ActionAPIServerRestart, func(url.Values) error { return c.RestartAPIServer() })
	handle(ActionNetFault, func(q url.Values) error {
		var delay time.Duration
		if d := q.Get("delay"); d != "" {
			var err error
			if delay, err = time.ParseDuration(d); err != nil {
				return fmt.Errorf("delay: %w", err)
			}
		}
		return c.NetFault(q.Get("node"), q.Get("fault"), delay)
	})
	handle(ActionOperatorStart, func(q url.Values) error {
		env := q["env"]
		if q.Get("clear-env") != "" {
			env = []string{}
		}
		return c.StartOperator(env)
	})
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go func() {
		<-ctx.Done()
		srv.Close()
	}()
	if err := srv.Serve(l); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("failed to serve the control socket: %w", err)
	}
	return nil
}

// Control asks the up process of the cluster described by st to carry out action with params,
// and returns once it is done.
func Control(ctx context.Context, st *State, action string, params url.Values) error {
	hc := &http.Client{Transport: &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", st.Socket)
		},
	}}
	u := "http://local/" + action
	if len(params) > 0 {
		u += "?" + params.Encode()
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, u, nil)
	if err != nil {
		return err
	}
	resp, err := hc.Do(req)
	if err != nil {
		return fmt.Errorf("failed to reach the local cluster (pid %d) on %s: %w", st.Pid, st.Socket, err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	if resp.StatusCode != http.StatusOK {
		return errors.New(strings.TrimSpace(string(body)))
	}
	return nil
}
