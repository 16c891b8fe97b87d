// Package redisx connects a Quarry service to the Redis server (or Redis Cluster) its
// replicas share: the gateway's answer cache and generations, the search service's
// pooled signals. It holds the connection settings, their flags and checks, and the
// client they make, so that every service reaches Redis the same way (TLS, ACL users,
// clusters, deadlines, tracing).
package redisx

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"flag"
	"fmt"
	"net"
	"os"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// Config says how to reach the Redis server a service's replicas share, and how long
// to wait for it.
type Config struct {
	// Addr is the server's host:port; with Cluster, a comma-separated list of nodes to
	// learn the cluster's layout from.
	Addr string
	// Cluster talks to a Redis Cluster. Every key Quarry uses then carries one hash tag
	// (Prefix), so that each script's keys are in one slot, as Redis Cluster requires:
	// Quarry's keys live on the one shard that slot belongs to (and its replicas).
	Cluster bool
	// DB is the logical database to select.
	DB int
	// Username and Password authenticate (ACL user, or requirepass with no user).
	Username, Password string
	// TLS dials the server with TLS; TLSCAFile, if set, is the PEM bundle that signs its
	// certificate (the system roots otherwise).
	TLS       bool
	TLSCAFile string
	// PoolSize is the number of connections kept per process.
	PoolSize int
	// DialTimeout bounds establishing one connection.
	DialTimeout time.Duration
	// Timeout bounds every call a service makes (each service says what it does past it).
	Timeout time.Duration
	// KeyPrefix starts every key and channel Quarry uses, so several deployments can
	// share one server.
	KeyPrefix string
}

// Flags describes a service's -redis-* flags: their defaults (Defaults), what the
// server is used for (Use, in the help of -redis-addr), what a call past -redis-timeout
// means for the service (PastTimeout), and the environment variable that should carry
// the password (PasswordEnv).
type Flags struct {
	Defaults    Config
	Use         string
	PastTimeout string
	PasswordEnv string
}

// RegisterFlags registers the connection flags with f's defaults.
func (c *Config) RegisterFlags(fs *flag.FlagSet, f Flags) {
	d := f.Defaults
	fs.StringVar(&c.Addr, "redis-addr", d.Addr, "Redis host:port ("+f.Use+"); with -redis-cluster, comma-separated cluster nodes")
	fs.BoolVar(&c.Cluster, "redis-cluster", d.Cluster, "Redis is a Redis Cluster: every key gets one hash tag, so all of them are in one slot")
	fs.IntVar(&c.DB, "redis-db", d.DB, "Redis logical database")
	fs.StringVar(&c.Username, "redis-username", d.Username, "Redis ACL user name (empty: default user)")
	fs.StringVar(&c.Password, "redis-password", d.Password, "Redis password (prefer the environment variable "+f.PasswordEnv+")")
	fs.BoolVar(&c.TLS, "redis-tls", d.TLS, "connect to Redis over TLS")
	fs.StringVar(&c.TLSCAFile, "redis-tls-ca", d.TLSCAFile, "PEM file of the CA that signs the Redis server certificate (default: system roots)")
	fs.IntVar(&c.PoolSize, "redis-pool-size", d.PoolSize, "Redis connections per process")
	fs.DurationVar(&c.DialTimeout, "redis-dial-timeout", d.DialTimeout, "deadline of one Redis connection attempt")
	fs.DurationVar(&c.Timeout, "redis-timeout", d.Timeout, "deadline of one Redis call; "+f.PastTimeout)
	fs.StringVar(&c.KeyPrefix, "redis-key-prefix", d.KeyPrefix, "prefix of every Redis key and channel Quarry uses")
}

// Validate rejects settings the Redis client cannot use, naming the flag.
func (c *Config) Validate() error {
	addrs := c.addrs()
	for _, a := range addrs {
		if _, _, err := net.SplitHostPort(a); err != nil {
			return fmt.Errorf("-redis-addr %q: want host:port: %w", a, err)
		}
	}
	switch {
	case len(addrs) > 1 && !c.Cluster:
		return fmt.Errorf("-redis-addr lists %d servers: a list is for -redis-cluster; one server takes one host:port", len(addrs))
	case c.Cluster && c.DB != 0:
		return fmt.Errorf("-redis-db %d: Redis Cluster has database 0 only", c.DB)
	case c.DB < 0:
		return fmt.Errorf("-redis-db must not be negative, got %d", c.DB)
	case c.PoolSize < 1:
		return fmt.Errorf("-redis-pool-size must be at least 1, got %d", c.PoolSize)
	case c.DialTimeout <= 0:
		return fmt.Errorf("-redis-dial-timeout must be positive, got %s", c.DialTimeout)
	case c.Timeout <= 0:
		return fmt.Errorf("-redis-timeout must be positive, got %s", c.Timeout)
	case c.TLSCAFile != "" && !c.TLS:
		return errors.New("-redis-tls-ca needs -redis-tls")
	case c.Cluster && !hasHashTag(c.Prefix()):
		// An empty prefix made "{}", one starting with "}" made "{}…}": an empty hash
		// tag, which Redis Cluster ignores, so every script's keys would spread over
		// slots and fail with CROSSSLOT.
		return fmt.Errorf("-redis-key-prefix %q makes no hash tag with -redis-cluster (it must not be empty or start with \"}\"): the tag keeps every key in one slot", c.KeyPrefix)
	}
	return nil
}

// addrs are the servers -redis-addr names.
func (c *Config) addrs() []string {
	var out []string
	for a := range strings.SplitSeq(c.Addr, ",") {
		if a = strings.TrimSpace(a); a != "" {
			out = append(out, a)
		}
	}
	if len(out) == 0 {
		return []string{c.Addr} // reported by Validate as not host:port
	}
	return out
}

// Prefix is what every key and channel name starts with: KeyPrefix, and in a cluster
// KeyPrefix made a hash tag ("quarry:" becomes "{quarry:}") unless it holds one already.
// Redis Cluster hashes only the tag of a key that has one, so every key shares a slot,
// and the scripts, which each touch several keys (an entry, its postings, the LRU
// index), run on one node as Redis Cluster requires.
func (c *Config) Prefix() string {
	if !c.Cluster || hasHashTag(c.KeyPrefix) {
		return c.KeyPrefix
	}
	return "{" + c.KeyPrefix + "}"
}

// hasHashTag reports whether Redis Cluster would hash only part of key: a "{" followed,
// later, by a "}" with at least one byte between them.
func hasHashTag(key string) bool {
	i := strings.IndexByte(key, '{')
	if i < 0 {
		return false
	}
	return strings.IndexByte(key[i+1:], '}') > 0
}

// MinReadTimeout is the least the client waits for a reply to a call without a
// deadline of its own: room for a health check that confirms an outage, far longer
// than a gateway's cache call.
const MinReadTimeout = 250 * time.Millisecond

// NewClient returns a client for c: of a Redis Cluster with Cluster, of one server
// otherwise, whose commands are client spans of the calls that make them (Trace). It
// does not connect: connections are made on first use and remade by the client
// whenever Redis comes back after an outage.
func (c *Config) NewClient() (redis.UniversalClient, error) {
	// The address as Validate read it: a stray space or comma from an environment
	// variable is not part of it.
	addr := c.addrs()[0]
	opt := &redis.Options{
		Addr:        addr,
		DB:          c.DB,
		Username:    c.Username,
		Password:    c.Password,
		PoolSize:    c.PoolSize,
		DialTimeout: c.DialTimeout,
		// One dial attempt: the caller (the gateway's breaker, the search's next
		// flush), not the client, decides when to try again.
		DialerRetries: 1,
		// Per-call deadlines come from the caller's context; these only bound calls
		// without one, and must leave room for a health check.
		ReadTimeout:           max(c.Timeout, MinReadTimeout),
		WriteTimeout:          max(c.Timeout, MinReadTimeout),
		ContextTimeoutEnabled: true,
		// A pooled connection that died with the server is retried once on a new one, at
		// once: a backoff would outlast the per-call deadline.
		MaxRetries:      1,
		MinRetryBackoff: -1,
		MaxRetryBackoff: -1,
		// RESP2 and no CLIENT SETINFO: nothing on connect that older servers refuse.
		Protocol:        2,
		DisableIdentity: true,
	}
	if c.TLS {
		tc := &tls.Config{MinVersion: tls.VersionTLS12}
		if !c.Cluster {
			// A cluster's nodes each have their own name: left empty, the TLS dial takes
			// it from the address of the node being dialled.
			tc.ServerName, _, _ = net.SplitHostPort(addr)
		}
		if c.TLSCAFile != "" {
			pem, err := os.ReadFile(c.TLSCAFile)
			if err != nil {
				return nil, fmt.Errorf("-redis-tls-ca: %w", err)
			}
			pool := x509.NewCertPool()
			if !pool.AppendCertsFromPEM(pem) {
				return nil, fmt.Errorf("-redis-tls-ca %s: no PEM certificate in it", c.TLSCAFile)
			}
			tc.RootCAs = pool
		}
		opt.TLSConfig = tc
	}
	var client redis.UniversalClient
	if c.Cluster {
		client = redis.NewClusterClient(clusterOptions(opt, c.addrs()))
	} else {
		client = redis.NewClient(opt)
	}
	if err := traceCommands(client); err != nil {
		client.Close()
		return nil, err
	}
	return client, nil
}

// clusterOptions are opt's settings for a cluster client that starts from addrs.
func clusterOptions(opt *redis.Options, addrs []string) *redis.ClusterOptions {
	return &redis.ClusterOptions{
		Addrs:                 addrs,
		Username:              opt.Username,
		Password:              opt.Password,
		PoolSize:              opt.PoolSize,
		DialTimeout:           opt.DialTimeout,
		DialerRetries:         opt.DialerRetries,
		ReadTimeout:           opt.ReadTimeout,
		WriteTimeout:          opt.WriteTimeout,
		ContextTimeoutEnabled: opt.ContextTimeoutEnabled,
		MaxRetries:            opt.MaxRetries,
		MinRetryBackoff:       opt.MinRetryBackoff,
		MaxRetryBackoff:       opt.MaxRetryBackoff,
		Protocol:              opt.Protocol,
		DisableIdentity:       opt.DisableIdentity,
		TLSConfig:             opt.TLSConfig,
		// A slot that moved (resharding, a failover) is followed to its new node at
		// once; the per-call deadline bounds the whole chase.
		MaxRedirects: 3,
	}
}
