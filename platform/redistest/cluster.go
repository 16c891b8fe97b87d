package redistest

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"
)

// Cluster is a Redis Cluster of throwaway servers: masters only, every slot assigned.
type Cluster struct {
	Nodes []*Server
}

// Addrs is the nodes' addresses, comma-separated, as -redis-addr takes them.
func (c *Cluster) Addrs() string {
	addrs := make([]string, len(c.Nodes))
	for i, n := range c.Nodes {
		addrs[i] = n.Addr
	}
	return strings.Join(addrs, ",")
}

// StartCluster runs n redis-servers in cluster mode (at least 3: redis-cli creates no
// smaller cluster), joins them with redis-cli --cluster create, and returns once every
// node reports the cluster ok. The servers are killed when the test ends.
func StartCluster(t testing.TB, n int) *Cluster {
	t.Helper()
	c, err := LaunchCluster(n)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Kill)
	return c
}

// LaunchCluster is StartCluster for callers without a testing.TB.
func LaunchCluster(n int) (*Cluster, error) {
	if n < 3 {
		return nil, fmt.Errorf("redistest: a cluster needs at least 3 nodes, not %d", n)
	}
	if _, err := exec.LookPath("redis-cli"); err != nil {
		return nil, errors.New("redis-cli not found on PATH: it comes with redis-server (`apt-get install -y redis-server`)")
	}
	c := &Cluster{}
	// Node state is written to a file per node, named after this process and the
	// port, and removed with the cluster.
	args := []string{"--cluster-enabled", "yes",
		"--cluster-config-file", "quarry-redistest-" + strconv.Itoa(os.Getpid()) + "-%d.conf",
		"--cluster-node-timeout", "2000"}
	for range n {
		s, err := launch(args)
		if err != nil {
			c.Kill()
			return nil, err
		}
		c.Nodes = append(c.Nodes, s)
	}
	create := append([]string{"--cluster", "create"}, strings.Split(c.Addrs(), ",")...)
	create = append(create, "--cluster-replicas", "0", "--cluster-yes")
	if out, err := exec.Command("redis-cli", create...).CombinedOutput(); err != nil {
		c.Kill()
		return nil, fmt.Errorf("redis-cli --cluster create: %w\n%s", err, out)
	}
	deadline := time.Now().Add(startTimeout)
	for _, s := range c.Nodes {
		for {
			out, err := exec.Command("redis-cli", "-p", strconv.Itoa(s.port), "cluster", "info").Output()
			if err == nil && bytes.Contains(out, []byte("cluster_state:ok")) {
				break
			}
			if time.Now().After(deadline) {
				c.Kill()
				return nil, fmt.Errorf("redistest: node %s not in an ok cluster within %s: %s", s.Addr, startTimeout, out)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	return c, nil
}

// Kill stops every node and removes their cluster state files.
func (c *Cluster) Kill() {
	for _, s := range c.Nodes {
		s.Kill()
		os.Remove(fmt.Sprintf("/tmp/quarry-redistest-%d-%d.conf", os.Getpid(), s.port))
	}
}
