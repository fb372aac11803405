package observe_test

import (
	"bufio"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/etcd-pilot/etcd-pilot/api/v1alpha1"
	"github.com/etcd-pilot/etcd-pilot/internal/observe"
)

// TestAskPeerEchoesNothingTheHostSent: a peer URL's host and port come from values a tenant
// sets (cluster domain, peer port), and the answer reaches conditions: it says what was wrong
// (HTTP status, no cluster ID, a failure's class) without the bytes the host answered.
func TestAskPeerEchoesNothingTheHostSent(t *testing.T) {
	for _, tc := range []struct {
		reply, want string
	}{
		{"HTTP/1.1 502 internal-secret-banner\r\nContent-Length: 0\r\n\r\n", "GET /members: HTTP 502"},
		{"HTTP/1.1 200 OK\r\nX-Etcd-Cluster-ID: internal-secret-banner\r\nContent-Length: 0\r\n\r\n", "names no cluster ID"},
		{"SSH-2.0-internal-secret-banner\r\n", "the connection failed"},
	} {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		go func() {
			for {
				c, err := l.Accept()
				if err != nil {
					return
				}
				// Answer once the request is in: a reply sent before it is one the client
				// drops as unsolicited, whatever it says (the test then failed now and then).
				r := bufio.NewReader(c)
				_ = c.SetReadDeadline(time.Now().Add(time.Second))
				for {
					line, err := r.ReadString('\n')
					if err != nil || line == "\r\n" {
						break
					}
				}
				fmt.Fprint(c, tc.reply)
				time.Sleep(20 * time.Millisecond)
				c.Close()
			}
		}()
		got := observe.AskPeer(t.Context(), nil, nil, time.Second, &v1alpha1.EtcdCluster{}, "http://"+l.Addr().String(), 0xc1, "")
		l.Close()
		if strings.Contains(got, "secret-banner") || !strings.Contains(got, tc.want) {
			t.Errorf("reply %q: answer %q, want %q and nothing the host sent", tc.reply, got, tc.want)
		}
	}
}
