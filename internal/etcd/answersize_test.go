package etcd_test

import (
	"context"
	"net"
	"strings"
	"testing"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"google.golang.org/grpc"

	"github.com/etcd-pilot/etcd-pilot/internal/etcd"
)

// hugeCluster answers MemberList with a member list of about size bytes: what a tenant's own
// image, run as a member, could send the operator.
type hugeCluster struct {
	pb.UnimplementedClusterServer
	size int
}

func (h hugeCluster) MemberList(context.Context, *pb.MemberListRequest) (*pb.MemberListResponse, error) {
	return &pb.MemberListResponse{Header: &pb.ResponseHeader{ClusterId: 1},
		Members: []*pb.Member{{ID: 1, Name: strings.Repeat("m", h.size)}}}, nil
}

// TestAnOversizedAnswerIsRefused: no answer from etcd may grow the operator's memory without
// bound (etcd.MaxAnswerBytes); an answer of a normal size passes.
func TestAnOversizedAnswerIsRefused(t *testing.T) {
	for _, tc := range []struct {
		size int
		ok   bool
	}{{size: 1 << 10, ok: true}, {size: 2 * etcd.MaxAnswerBytes, ok: false}} {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		srv := grpc.NewServer(grpc.MaxSendMsgSize(4 * etcd.MaxAnswerBytes))
		pb.RegisterClusterServer(srv, hugeCluster{size: tc.size})
		go func() { _ = srv.Serve(l) }()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		c, err := etcd.Dial(ctx, []string{"http://" + l.Addr().String()}, nil)
		if err != nil {
			t.Fatal(err)
		}
		_, err = c.MemberList(ctx)
		if (err == nil) != tc.ok {
			t.Errorf("a member list of %d bytes: error %v", tc.size, err)
		}
		_ = c.Close()
		cancel()
		srv.Stop()
	}
}
