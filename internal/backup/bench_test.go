package backup_test

import (
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/etcd-pilot/etcd-pilot/internal/backup"
	"github.com/etcd-pilot/etcd-pilot/internal/etcd"
	"github.com/etcd-pilot/etcd-pilot/internal/testutil/etcdproc"
)

// benchDBSize is how large the benchmark's database grows before it measures.
const benchDBSize = 512 << 20

// BenchmarkSnapshotStream reads one member's snapshot of at least 512 MiB twice per
// iteration: (a) raw into io.Discard, (b) through a Verifier into io.Discard. It reports both
// throughputs (MB/s, 10^6 bytes per second), their ratio, and how much the Go heap in use grew
// over its level before each read (sampled every 2 ms; garbage not yet collected counts), to
// show that verifying costs no memory in proportion to the snapshot.
//
//	go test -run '^$' -bench SnapshotStream -benchtime 1x ./internal/backup
func BenchmarkSnapshotStream(b *testing.B) {
	ep := etcdproc.Start(b, "127.0.41.20", fmt.Sprintf("--quota-backend-bytes=%d", 2<<30))
	c := dial(b, ep)
	fill(b, c, ep, benchDBSize)

	var raw, verified pass
	for b.Loop() {
		raw.add(b, c, ep, false)
		verified.add(b, c, ep, true)
	}
	if raw.bytes != verified.bytes {
		b.Fatalf("the raw reads saw %d bytes, the verified ones %d", raw.bytes, verified.bytes)
	}
	b.ReportMetric(float64(raw.bytes)/float64(b.N)/(1<<20), "snapshot-MiB")
	b.ReportMetric(raw.mbps(), "raw-MB/s")
	b.ReportMetric(verified.mbps(), "verified-MB/s")
	b.ReportMetric(verified.mbps()/raw.mbps(), "verified/raw")
	b.ReportMetric(raw.peakHeap/(1<<20), "raw-heap-growth-MiB")
	b.ReportMetric(verified.peakHeap/(1<<20), "verified-heap-growth-MiB")
}

// pass accumulates one kind of read over the benchmark's iterations.
type pass struct {
	bytes    int64
	took     time.Duration
	peakHeap float64 // the largest growth of HeapInuse seen in any one read, in bytes
}

func (p *pass) mbps() float64 { return float64(p.bytes) / p.took.Seconds() / 1e6 }

func (p *pass) add(b *testing.B, c etcd.Client, ep string, verify bool) {
	b.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	runtime.GC()
	stop := sampleHeap()
	start := time.Now()
	snap, err := c.Snapshot(ctx, ep)
	if err != nil {
		b.Fatal(err)
	}
	var r io.Reader = snap
	var v *backup.Verifier
	if verify {
		v = backup.NewVerifier(snap)
		r = v
	}
	n, err := io.Copy(io.Discard, r)
	took := time.Since(start)
	growth := stop()
	_ = snap.Close()
	if err != nil {
		b.Fatalf("read %d bytes of the snapshot (verify=%v): %v", n, verify, err)
	}
	if v != nil && v.Size() != n {
		b.Fatalf("the verifier counted %d bytes of %d", v.Size(), n)
	}
	p.bytes += n
	p.took += took
	p.peakHeap = max(p.peakHeap, float64(growth))
}

// sampleHeap reads HeapInuse every 2 ms until the returned function is called, which returns
// the peak minus the level when sampling began.
func sampleHeap() func() int64 {
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	base := int64(ms.HeapInuse)
	var peak atomic.Int64
	peak.Store(base)
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		t := time.NewTicker(2 * time.Millisecond)
		defer t.Stop()
		var ms runtime.MemStats
		for {
			select {
			case <-done:
				return
			case <-t.C:
				runtime.ReadMemStats(&ms)
				if v := int64(ms.HeapInuse); v > peak.Load() {
					peak.Store(v)
				}
			}
		}
	})
	return func() int64 {
		close(done)
		wg.Wait()
		return peak.Load() - base
	}
}

// fill writes 1 MiB values under distinct keys until the member's database holds size bytes.
func fill(b *testing.B, c etcd.Client, ep string, size int64) {
	b.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{ep}, DialTimeout: 2 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		b.Fatal(err)
	}
	defer cli.Close()
	// Random bytes: bbolt does not compress, but nothing should get a chance to.
	value := make([]byte, 1<<20)
	rng := rand.NewChaCha8([32]byte{1})
	_, _ = rng.Read(value)
	start := time.Now()
	var next atomic.Int64
	for {
		st, err := c.Status(ctx, ep)
		if err != nil {
			b.Fatal(err)
		}
		if st.DBSizeInUse >= size {
			b.Logf("filled the database to %d MiB (%d MiB in use) in %s", st.DBSize>>20, st.DBSizeInUse>>20, time.Since(start).Round(time.Second))
			return
		}
		// Write what is missing, four at a time.
		missing := int((size-st.DBSizeInUse)>>20) + 1
		var wg sync.WaitGroup
		errs := make(chan error, 4)
		for range 4 {
			wg.Go(func() {
				for i := 0; i < missing/4+1; i++ {
					if _, err := cli.Put(ctx, fmt.Sprintf("fill/%06d", next.Add(1)), string(value)); err != nil {
						errs <- err
						return
					}
				}
			})
		}
		wg.Wait()
		close(errs)
		if err := <-errs; err != nil {
			b.Fatalf("failed to fill etcd: %v", err)
		}
	}
}
