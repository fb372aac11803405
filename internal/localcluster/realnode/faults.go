package realnode

import (
	"bytes"
	"fmt"
	"os/exec"
	"strings"
	"time"
)

// Network faults of a lane node, applied in its network namespace to its only link (eth0):
// everything the node sends or receives (its pods' traffic, the kubelet's to the API server).
const (
	// FaultPartition drops every packet in and out: the node is cut off from the other nodes
	// and the API server.
	FaultPartition = "partition"
	// FaultInbound drops what arrives at the node only; what it sends still leaves.
	FaultInbound = "inbound"
	// FaultLatency delays what the node sends (tc netem), where the kernel has netem.
	FaultLatency = "latency"
	// FaultHeal removes the node's faults.
	FaultHeal = "heal"
)

// faultChain is the iptables chain of the faults, first in INPUT, OUTPUT and FORWARD (ahead
// of kube-proxy's, which it leaves alone).
const faultChain = "ETCD-PILOT-FAULT"

// ApplyFault applies fault to the node whose process is pid (delay for FaultLatency).
func ApplyFault(pid int, fault string, delay time.Duration) error {
	run := func(name string, args ...string) error {
		cmd := exec.Command("nsenter", append([]string{fmt.Sprintf("--net=/proc/%d/ns/net", pid), "--", name}, args...)...)
		var out bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &out
		if err := cmd.Run(); err != nil {
			return fmt.Errorf("%s %s: %w: %s", name, strings.Join(args, " "), err, strings.TrimSpace(out.String()))
		}
		return nil
	}
	ensureChain := func() error {
		if run("iptables", "-w", "-L", faultChain, "-n") != nil {
			if err := run("iptables", "-w", "-N", faultChain); err != nil {
				return err
			}
		}
		for _, base := range []string{"INPUT", "OUTPUT", "FORWARD"} {
			if run("iptables", "-w", "-C", base, "-j", faultChain) != nil {
				if err := run("iptables", "-w", "-I", base, "1", "-j", faultChain); err != nil {
					return err
				}
			}
		}
		return run("iptables", "-w", "-F", faultChain)
	}
	switch fault {
	case FaultHeal:
		_ = run("iptables", "-w", "-F", faultChain)
		_ = run("tc", "qdisc", "del", "dev", "eth0", "root")
		return nil
	case FaultPartition:
		if err := ensureChain(); err != nil {
			return err
		}
		if err := run("iptables", "-w", "-A", faultChain, "-i", "eth0", "-j", "DROP"); err != nil {
			return err
		}
		return run("iptables", "-w", "-A", faultChain, "-o", "eth0", "-j", "DROP")
	case FaultInbound:
		if err := ensureChain(); err != nil {
			return err
		}
		return run("iptables", "-w", "-A", faultChain, "-i", "eth0", "-j", "DROP")
	case FaultLatency:
		if delay <= 0 {
			return fmt.Errorf("latency needs a delay")
		}
		ms := fmt.Sprintf("%dms", delay.Milliseconds())
		if err := run("tc", "qdisc", "replace", "dev", "eth0", "root", "netem", "delay", ms); err != nil {
			if strings.Contains(err.Error(), "qdisc kind is unknown") {
				return fmt.Errorf("this kernel has no netem queueing discipline (sch_netem), so the lane cannot add latency: %w", err)
			}
			return err
		}
		return nil
	}
	return fmt.Errorf("unknown network fault %q (%s, %s, %s or %s)", fault, FaultPartition, FaultInbound, FaultLatency, FaultHeal)
}
