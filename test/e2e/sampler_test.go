package e2e

import (
	"context"
	"crypto/tls"
	"fmt"
	"maps"
	"net"
	"net/url"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

const (
	// sampleEvery is the sampler's period.
	sampleEvery = 250 * time.Millisecond
	// sampleTimeout bounds each question the sampler asks a member: a member that does not
	// answer Status within it counts as unhealthy for that sample.
	sampleTimeout = 500 * time.Millisecond
)

// memberPod matches the names of the pods of the cluster "etcd" that every scenario creates.
var memberPod = regexp.MustCompile(`^etcd-(\d+)$`)

// sampler checks safety rules against etcd itself throughout a scenario, never against the
// operator's status. Every sampleEvery it asks every member it can find (the pods of the
// cluster, and the client URLs of the last member list) for its Status, and the leader (or,
// failing that, any member that answers) for the member list; it matches the answers by
// member ID. A voter is healthy when it answered Status without errors and names the leader
// most voters name. The rules:
//
//   - at most one learner;
//   - one cluster ID among every member that answers;
//   - once a leader was seen, never fewer healthy voters than a quorum of the voters, unless
//     the members the scenario took down itself (allowDown) explain the shortfall.
//
// A quorum shortfall is a problem when two samples in a row show it: a single one is logged
// as a dip, since one answer that took longer than sampleTimeout on a busy machine looks
// like an unhealthy member, while a member the operator took down stays down for seconds.
type sampler struct {
	ns     string
	cancel context.CancelFunc
	done   chan struct{}
	once   sync.Once

	mu       sync.Mutex
	allowed  map[string]bool   // names given to allowDown, not yet bound to a member ID
	excused  map[uint64]string // IDs of the members the scenario takes down, and their names
	members  []*pb.Member      // the last member list an answer carried
	formed   bool              // a sample saw voters agree on a leader
	samples  int
	fewest   int // fewest healthy voters in a sample since the cluster formed, -1 before
	fewestOf int // the voters in that sample
	streak   int // samples in a row with a quorum shortfall
	pending  string
	dips     []string
	problems []string
}

// samplerResult is what a sampler saw.
type samplerResult struct {
	// Samples is the number of samples taken.
	Samples int
	// FewestHealthyVoters is the fewest healthy voters in one sample since the cluster
	// formed (-1 when it never did), out of VotersThen voting members.
	FewestHealthyVoters, VotersThen int
	// Dips is the number of single samples below quorum that the next sample did not confirm.
	Dips int
}

// startSampler starts sampling the cluster "etcd" in ns until finish (or the end of the test).
func startSampler(t testing.TB, ns string) *sampler {
	ctx, cancel := context.WithCancel(context.Background())
	s := &sampler{ns: ns, cancel: cancel, done: make(chan struct{}), allowed: map[string]bool{}, excused: map[uint64]string{}, fewest: -1}
	go func() {
		defer close(s.done)
		tick := time.NewTicker(sampleEvery)
		defer tick.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
			s.sample(ctx)
		}
	}()
	t.Cleanup(s.stop)
	return s
}

func (s *sampler) stop() {
	s.once.Do(func() {
		s.cancel()
		<-s.done
	})
}

// allowDown says that the scenario itself takes the named members down (stops their node,
// kills or wipes them). A name is bound to the member ID it has at the next sample, so a
// replacement under the same name is not excused: call allowDown before injecting the fault.
// An excused member that is an unhealthy voter makes a quorum shortfall no problem only as
// far as it explains it: the rule becomes "never fewer healthy voters than a quorum, or than
// the voters not excused, whichever is fewer". A scenario that takes down one member of
// three is checked as strictly as without allowDown; one that takes down two may see one
// healthy voter, but not none.
func (s *sampler) allowDown(names ...string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, n := range names {
		s.allowed[n] = true
	}
}

// endDown ends what allowDown said for the named members: once the scenario has brought them
// back and etcd reports them healthy, they are checked as strictly as any other member again.
func (s *sampler) endDown(names ...string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, n := range names {
		delete(s.allowed, n)
		for id, name := range s.excused {
			if name == n {
				delete(s.excused, id)
			}
		}
	}
}

// firstProblem is the first broken rule the sampler saw so far, "" while none.
func (s *sampler) firstProblem() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.problems) == 0 {
		return ""
	}
	return s.problems[0]
}

// finish stops the sampler, logs what it saw, fails the test if a rule was broken or if it
// never reached the cluster (then it checked nothing), and returns the figures.
func (s *sampler) finish(t testing.TB) samplerResult {
	t.Helper()
	s.stop()
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.streak == 1 { // the last sample's shortfall was never confirmed
		s.dips = append(s.dips, s.pending)
	}
	r := samplerResult{Samples: s.samples, FewestHealthyVoters: s.fewest, VotersThen: s.fewestOf, Dips: len(s.dips)}
	for i, d := range s.dips {
		if i == 5 {
			t.Logf("sampler: %d more single-sample dips", len(s.dips)-i)
			break
		}
		t.Logf("sampler: single-sample dip below quorum, not confirmed by the next sample: %s", d)
	}
	if len(s.problems) > 0 {
		t.Fatalf("%d of %d samples of etcd broke a safety rule; first: %s", len(s.problems), s.samples, s.problems[0])
	}
	if !s.formed {
		t.Fatalf("in %d samples no voter of the cluster named a leader: the sampler checked nothing", s.samples)
	}
	t.Logf("%d samples of etcd's Status and member list, none unsafe; fewest healthy voters seen: %d of %d", s.samples, s.fewest, s.fewestOf)
	return r
}

// statusAnswer is one member's answer to Status.
type statusAnswer struct {
	addr string
	conn *grpc.ClientConn
	resp *pb.StatusResponse
	err  error
}

// sample takes one sample and records it, unless ctx ended meanwhile.
func (s *sampler) sample(ctx context.Context) {
	s.mu.Lock()
	last := s.members
	s.mu.Unlock()
	addrs := s.addresses(ctx, last)
	answers := make([]statusAnswer, len(addrs))
	var wg sync.WaitGroup
	for i, addr := range addrs {
		wg.Go(func() { answers[i] = askStatus(ctx, addr, clientTLSOf(s.ns)) })
	}
	wg.Wait()
	defer func() {
		for _, a := range answers {
			if a.conn != nil {
				a.conn.Close()
			}
		}
	}()

	// One answer per member, by the ID it reports.
	byID := map[uint64]*pb.StatusResponse{}
	clusterIDs := map[uint64]bool{}
	leaderVotes := map[uint64]int{}
	var unreached []string
	for _, a := range answers {
		if a.err != nil {
			unreached = append(unreached, fmt.Sprintf("%s: %v", a.addr, a.err))
			continue
		}
		id := a.resp.Header.GetMemberId()
		if _, seen := byID[id]; seen {
			continue
		}
		byID[id] = a.resp
		clusterIDs[a.resp.Header.GetClusterId()] = true
		if len(a.resp.Errors) == 0 && a.resp.Leader != 0 {
			leaderVotes[a.resp.Leader]++
		}
	}

	// The member list, from the member most name as leader first.
	order := slices.Clone(answers)
	sort.SliceStable(order, func(i, j int) bool {
		return order[i].resp != nil && (order[j].resp == nil || leaderVotes[order[i].resp.Header.GetMemberId()] > leaderVotes[order[j].resp.Header.GetMemberId()])
	})
	var list *pb.MemberListResponse
	for _, a := range order {
		if a.err != nil || ctx.Err() != nil {
			continue
		}
		lctx, cancel := context.WithTimeout(ctx, sampleTimeout)
		resp, err := pb.NewClusterClient(a.conn).MemberList(lctx, &pb.MemberListRequest{Linearizable: true})
		cancel()
		if err == nil {
			list = resp
			clusterIDs[resp.Header.GetClusterId()] = true
			break
		}
	}
	if ctx.Err() != nil {
		return
	}
	members, listNote := last, " (member list of an earlier sample: no member answered MemberList)"
	if list != nil {
		members, listNote = list.Members, ""
	}

	// Voters, learners, and the voters that agree on the leader most voters name.
	voters, learners := 0, 0
	votes := map[uint64]int{}
	for _, m := range members {
		if m.IsLearner {
			learners++
			continue
		}
		voters++
		if st := byID[m.ID]; st != nil && len(st.Errors) == 0 && st.Leader != 0 {
			votes[st.Leader]++
		}
	}
	leader, healthy := uint64(0), 0
	for id, n := range votes {
		if n > healthy || (n == healthy && id < leader) {
			leader, healthy = id, n
		}
	}

	s.mu.Lock()
	defer s.mu.Unlock()
	if list != nil {
		s.members = list.Members
	}
	for _, m := range members {
		if s.allowed[m.Name] {
			s.excused[m.ID] = m.Name
			delete(s.allowed, m.Name)
		}
	}
	excusedDown := 0
	for _, m := range members {
		if _, ok := s.excused[m.ID]; ok && !m.IsLearner {
			if st := byID[m.ID]; leader == 0 || st == nil || len(st.Errors) > 0 || st.Leader != leader {
				excusedDown++
			}
		}
	}
	s.samples++
	if healthy > 0 {
		s.formed = true
	}
	at := time.Now().Format("15:04:05.000")
	describe := func() string {
		return fmt.Sprintf("%s %d of %d voters healthy (leader %x), %d learners, cluster IDs %s%s; members: %s; not reached: %v",
			at, healthy, voters, leader, learners, hexIDs(clusterIDs), listNote, describeMembers(members, byID, leader), unreached)
	}
	if learners > 1 {
		s.problems = append(s.problems, "more than one learner: "+describe())
	}
	if len(clusterIDs) > 1 {
		s.problems = append(s.problems, "more than one cluster ID: "+describe())
	}
	if !s.formed {
		return
	}
	if s.fewest < 0 || healthy < s.fewest {
		s.fewest, s.fewestOf = healthy, voters
	}
	quorum := voters/2 + 1
	if healthy < quorum && healthy < voters-excusedDown {
		s.streak++
		switch s.streak {
		case 1:
			s.pending = describe()
		case 2:
			s.problems = append(s.problems, "fewer healthy voters than quorum in two samples in a row: "+s.pending+" then "+describe())
		default:
			s.problems = append(s.problems, "fewer healthy voters than quorum: "+describe())
		}
		return
	}
	if s.streak == 1 {
		s.dips = append(s.dips, s.pending)
	}
	s.streak = 0
}

// addresses returns the host:port of every member the sampler should ask: the pods of the
// cluster and the client URLs in the member list last seen.
func (s *sampler) addresses(ctx context.Context, members []*pb.Member) []string {
	set := map[string]bool{}
	pods := &corev1.PodList{}
	if err := k8s.List(ctx, pods, client.InNamespace(s.ns)); err == nil {
		for _, p := range pods.Items {
			if m := memberPod.FindStringSubmatch(p.Name); m != nil {
				ordinal, _ := strconv.Atoi(m[1])
				if u, err := url.Parse(endpoint(s.ns, ordinal)); err == nil {
					set[u.Host] = true
				}
			}
		}
	}
	for _, m := range members {
		for _, cu := range m.ClientURLs {
			if u, err := url.Parse(cu); err == nil && u.Host != "" {
				set[u.Host] = true
			}
		}
	}
	return slices.Sorted(maps.Keys(set))
}

// askStatus asks the member at addr (a name resolved through the local cluster's hosts file)
// for its Status on a connection of its own, which the caller closes; over TLS with tlsCfg
// when it is set.
func askStatus(ctx context.Context, addr string, tlsCfg *tls.Config) statusAnswer {
	a := statusAnswer{addr: addr}
	creds := insecure.NewCredentials()
	if tlsCfg != nil {
		c := tlsCfg.Clone()
		c.ServerName, _, _ = net.SplitHostPort(addr)
		creds = credentials.NewTLS(c)
	}
	a.conn, a.err = grpc.NewClient("passthrough:///"+addr,
		grpc.WithTransportCredentials(creds), grpc.WithContextDialer(dialName))
	if a.err != nil {
		return a
	}
	sctx, cancel := context.WithTimeout(ctx, sampleTimeout)
	defer cancel()
	a.resp, a.err = pb.NewMaintenanceClient(a.conn).Status(sctx, &pb.StatusRequest{})
	return a
}

// describeMembers says, member by member, what each answered.
func describeMembers(members []*pb.Member, byID map[uint64]*pb.StatusResponse, leader uint64) string {
	var parts []string
	for _, m := range members {
		role := "voter"
		if m.IsLearner {
			role = "learner"
		}
		state := "no answer"
		if st := byID[m.ID]; st != nil {
			state = fmt.Sprintf("leader %x", st.Leader)
			if st.Leader != leader {
				state += " (disagrees)"
			}
			if len(st.Errors) > 0 {
				state += fmt.Sprintf(", errors %v", st.Errors)
			}
		}
		parts = append(parts, fmt.Sprintf("%s %x %s: %s", m.Name, m.ID, role, state))
	}
	return strings.Join(parts, ", ")
}

func hexIDs(ids map[uint64]bool) string {
	var out []string
	for _, id := range slices.Sorted(maps.Keys(ids)) {
		out = append(out, fmt.Sprintf("%x", id))
	}
	return "[" + strings.Join(out, " ") + "]"
}
