package objstore

import (
	"runtime"
	"sync"
	"testing"
	"time"

	testminio "github.com/etcd-pilot/etcd-pilot/internal/testutil/minio"
)

// BenchmarkS3Put uploads 512 MiB from a generator (which holds 64 KiB, not the object) to a
// real MinIO with the default part size, and reports the throughput (MB/s) and how far the heap
// in use rose above its level before the upload (peak-heap-MiB): Put's memory, which must stay
// about one part (8 MiB) whatever the object's size. Run it with -benchtime 1x.
func BenchmarkS3Put(b *testing.B) {
	const size = 512 << 20
	srv := testminio.Start(b)
	s, err := NewS3(S3Config{Endpoint: srv.Endpoint, Bucket: srv.Bucket, AccessKeyID: srv.AccessKey, SecretAccessKey: srv.SecretKey, Egress: localEgress})
	if err != nil {
		b.Fatal(err)
	}
	ctx := b.Context()
	b.SetBytes(size)
	var peak uint64
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		runtime.GC()
		base := heapInuse()
		stop := sampleHeap(func(inuse uint64) {
			if inuse > base && inuse-base > peak {
				peak = inuse - base
			}
		})
		b.StartTimer()
		n, err := s.Put(ctx, "bench/snap.db", &pattern{left: size})
		b.StopTimer()
		stop()
		if err != nil {
			b.Fatal(err)
		}
		if n != size {
			b.Fatalf("Put stored %d bytes, want %d", n, size)
		}
		if err := s.Delete(ctx, "bench/snap.db"); err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
	}
	b.ReportMetric(float64(peak)/(1<<20), "peak-heap-MiB")
}

func heapInuse() uint64 {
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapInuse
}

// sampleHeap calls f with HeapInuse every 5ms, from a goroutine, until the returned stop is
// called; stop returns after the last call.
func sampleHeap(f func(inuse uint64)) (stop func()) {
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		t := time.NewTicker(5 * time.Millisecond)
		defer t.Stop()
		for {
			f(heapInuse())
			select {
			case <-done:
				return
			case <-t.C:
			}
		}
	}()
	return func() {
		close(done)
		wg.Wait()
		f(heapInuse())
	}
}
