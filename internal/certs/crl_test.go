package certs_test

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/etcd-pilot/etcd-pilot/internal/certs"
	"github.com/etcd-pilot/etcd-pilot/internal/testutil/etcdproc"
)

// TestRevocationListRefusesARevokedClient: a real etcd reading the list RevocationList writes
// (--client-crl-file, DER as etcd 3.6 parses it) takes a client certificate of its CA that
// the list does not name and refuses one it names; a list rewritten on disk (as the kubelet
// refreshes a Secret volume) takes effect on the next connection, without a restart.
func TestRevocationListRefusesARevokedClient(t *testing.T) {
	const ip = "127.0.63.1"
	now := time.Now()
	ca, err := certs.NewCA("ca", now, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	server, err := certs.Issue(ca, certs.Request{CommonName: "server", IPs: []net.IP{net.ParseIP(ip)}, Server: true, Client: true, Validity: time.Hour}, now)
	if err != nil {
		t.Fatal(err)
	}
	app, err := certs.Issue(ca, certs.Request{CommonName: "app", Client: true, Validity: time.Hour}, now)
	if err != nil {
		t.Fatal(err)
	}
	other, err := certs.Issue(ca, certs.Request{CommonName: "other", Client: true, Validity: time.Hour}, now)
	if err != nil {
		t.Fatal(err)
	}
	appLeaf, err := certs.Parse(app.Cert)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	write := func(name string, b []byte) string {
		t.Helper()
		p := filepath.Join(dir, name)
		// Replaced whole, as the kubelet swaps a Secret volume's files.
		if err := os.WriteFile(p+".new", b, 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(p+".new", p); err != nil {
			t.Fatal(err)
		}
		return p
	}
	empty, err := certs.RevocationList(ca, nil, 1, now)
	if err != nil {
		t.Fatal(err)
	}
	crl := write("crl.der", empty)
	url := fmt.Sprintf("https://%s:2379", ip)
	etcdproc.Start(t, ip, "--listen-client-urls="+url+",http://"+ip+":2379", "--advertise-client-urls="+url,
		"--cert-file="+write("server.crt", server.Cert), "--key-file="+write("server.key", server.Key),
		"--trusted-ca-file="+write("ca.crt", ca.Cert), "--client-cert-auth=true", "--client-crl-file="+crl)

	put := func(pair certs.KeyPair) error {
		cert, err := tls.X509KeyPair(pair.Cert, pair.Key)
		if err != nil {
			t.Fatal(err)
		}
		pool := x509.NewCertPool()
		pool.AppendCertsFromPEM(ca.Cert)
		cl, err := clientv3.New(clientv3.Config{Endpoints: []string{url}, DialTimeout: 2 * time.Second,
			TLS: &tls.Config{Certificates: []tls.Certificate{cert}, RootCAs: pool, MinVersion: tls.VersionTLS12}})
		if err != nil {
			return err
		}
		defer cl.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		defer cancel()
		_, err = cl.Put(ctx, "k", "v")
		return err
	}
	if err := put(app); err != nil {
		t.Fatalf("a client certificate the list does not name is refused: %v", err)
	}
	revoked, err := certs.RevocationList(ca, []string{certs.Serial(appLeaf)}, 2, now)
	if err != nil {
		t.Fatal(err)
	}
	write("crl.der", revoked)
	if err := put(app); err == nil {
		t.Fatal("etcd took a revoked client certificate")
	}
	if err := put(other); err != nil {
		t.Fatalf("a certificate the list does not name is refused once another is revoked: %v", err)
	}
}
