package observe_test

import (
	"bufio"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

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
		l := answering(t, tc.reply)
		_, port, _ := net.SplitHostPort(l.Addr().String())
		got := observe.AskPeer(t.Context(), memberPods("127.0.0.1"), nil, time.Second, askCluster, "http://etcd-0.etcd.ns.svc:"+port, 0xc1, "")
		l.Close()
		if strings.Contains(got, "secret-banner") || !strings.Contains(got, tc.want) {
			t.Errorf("reply %q: answer %q, want %q and nothing the host sent", tc.reply, got, tc.want)
		}
	}
}

// answering is a listener on loopback that answers every connection with reply, once the
// request is in: a reply sent before it is one the client drops as unsolicited, whatever it
// says (the test then failed now and then).
func answering(t *testing.T, reply string) net.Listener {
	t.Helper()
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
			r := bufio.NewReader(c)
			_ = c.SetReadDeadline(time.Now().Add(time.Second))
			for {
				line, err := r.ReadString('\n')
				if err != nil || line == "\r\n" {
					break
				}
			}
			fmt.Fprint(c, reply)
			time.Sleep(20 * time.Millisecond)
			c.Close()
		}
	}()
	return l
}

// askCluster is the cluster whose member pods memberPods holds.
var askCluster = &v1alpha1.EtcdCluster{ObjectMeta: metav1.ObjectMeta{Name: "etcd", Namespace: "ns"}}

// memberPods is a reader of askCluster's member pod etcd-0 at ip, and of a pod of another
// cluster, other-0.
func memberPods(ip string) client.Reader {
	s := runtime.NewScheme()
	_ = corev1.AddToScheme(s)
	return fake.NewClientBuilder().WithScheme(s).WithObjects(
		&corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "etcd-0", Labels: map[string]string{v1alpha1.LabelCluster: "etcd"}}, Status: corev1.PodStatus{PodIP: ip}},
		&corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "other-0", Labels: map[string]string{v1alpha1.LabelCluster: "other"}}, Status: corev1.PodStatus{PodIP: ip}},
	).WithStatusSubresource(&corev1.Pod{}).Build()
}

// TestAskPeerConnectsToTheMemberPod: the peer URL's host comes from a value a tenant sets
// (the cluster domain); the operator never resolves it, and connects to the IP of the member
// pod the host names, so a domain pointed elsewhere leads nowhere else. A host that names no
// member pod of this cluster is not asked at all.
func TestAskPeerConnectsToTheMemberPod(t *testing.T) {
	l := answering(t, "HTTP/1.1 200 OK\r\nX-Etcd-Cluster-ID: c1\r\nContent-Length: 0\r\n\r\n")
	defer l.Close()
	_, port := splitPort(t, l.Addr().String())
	pods := memberPods("127.0.0.1")
	for _, tc := range []struct{ url, want string }{
		// .invalid never resolves: an answer can only come from the pod's IP.
		{"http://etcd-0.etcd.ns.svc.attacker.invalid:" + port, ""},
		{"http://other-0.etcd.ns.svc:" + port, "pod other-0 is no member of this cluster"},
		{"http://etcd-7.etcd.ns.svc:" + port, "no member pod etcd-7"},
		{"http://etcd-0.etcd.ns.svc", "names no port"},
	} {
		if got := observe.AskPeer(t.Context(), pods, nil, time.Second, askCluster, tc.url, 0xc1, ""); (tc.want == "" && got != "") || !strings.Contains(got, tc.want) {
			t.Errorf("AskPeer(%s) = %q, want %q", tc.url, got, tc.want)
		}
	}
}

func splitPort(t *testing.T, addr string) (string, string) {
	t.Helper()
	h, p, err := net.SplitHostPort(addr)
	if err != nil {
		t.Fatal(err)
	}
	return h, p
}
