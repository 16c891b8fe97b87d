package kbgen

import "strings"

// domainDef is one domain's vocabulary: the words its documents use more than others do, and
// the command-line tool its runbooks call.
type domainDef struct {
	name  string
	tool  string
	words []string
}

// domains is the catalogue Generate draws from, in order. Options.Domains may not exceed it.
var domains = []domainDef{
	{"auth", "authctl", f(`token session login password credential identity issuer audience claim
		signing jwks oauth scope consent grant client secret refresh bearer sso saml mfa totp
		directory group role permission principal impersonation lockout expiry nonce cookie
		federation provider assertion verifier keyring tenant entitlement`)},
	{"deploy", "deployctl", f(`release rollout rollback canary image manifest cluster namespace pod
		replica container helm chart argo sync pipeline workflow runner artifact registry tag
		promotion staging production freeze train hotfix drain node autoscaler probe readiness
		liveness ingress blue green overlay kustomize`)},
	{"observability", "obsctl", f(`metric trace span log alert dashboard panel exporter collector
		sampler histogram counter gauge label cardinality scrape rule receiver silence pager
		oncall incident slo budget burn latency percentile retention loki tempo prometheus
		grafana annotation heatmap exemplar`)},
	{"data", "datactl", f(`postgres table index query schema migration replica primary backup
		restore wal vacuum autovacuum bloat partition sequence constraint transaction lock
		deadlock pooler pgbouncer statement planner tablespace snapshot checkpoint replication
		failover patroni column row tuple`)},
	{"network", "netctl", f(`dns resolver record zone subnet route gateway firewall peering
		loadbalancer listener certificate tls handshake mtls proxy envoy sidecar mesh egress
		ingress port socket packet mtu bandwidth cidr nat vpc anycast healthcheck upstream
		keepalive`)},
	{"storage", "storectl", f(`bucket object volume disk snapshot blob lifecycle tier archive
		encryption replication quota filesystem mount iops throughput latency erasure shard
		checksum multipart upload download prefix versioning retention glacier nfs block
		provisioner claim`)},
	{"payments", "payctl", f(`invoice charge refund payout ledger settlement currency card
		acquirer processor chargeback dispute merchant subscription plan proration tax vat
		receipt reconciliation authorization capture wallet balance fee fraud risk threshold
		statement billing`)},
	{"queues", "queuectl", f(`queue topic consumer producer message broker partition offset
		backlog dlq retry delay visibility ack nack batch throughput ordering idempotency dedup
		exchange binding subscription fanout redelivery poison lag worker scheduler cron`)},
	{"security", "secctl", f(`vulnerability cve scanner patch audit secret vault rotation
		encryption kms hsm policy compliance pentest finding severity exception waiver sbom
		signature attestation provenance firewall waf ddos intrusion forensics quarantine
		hardening baseline`)},
	{"frontend", "webctl", f(`bundle webpack vite asset cdn cache browser component render
		hydration route navigation stylesheet font image lazy prefetch accessibility locale
		translation analytics consent cookie sourcemap lighthouse vitals layout hook state
		storybook`)},
	{"mobile", "mobctl", f(`app ios android build signing provisioning certificate store review
		release crash symbolication push notification deeplink simulator emulator testflight
		rollout version flag offline sync battery permission screen gesture widget keychain
		keystore`)},
	{"compute", "computectl", f(`instance vm autoscaling spot reservation capacity cpu memory
		gpu quota image ami boot kernel sysctl hypervisor host rack zone region placement
		scheduler batch job queue preemption tenancy ulimit cgroup numa hugepage`)},
}

// topicWords feeds topic pools across every domain, so neighbouring topics share some words
// the way real runbooks do.
var topicWords = f(`cache eviction timeout threshold budget quota limit window buffer backoff jitter
	rate burst bucket pool worker shard replica leader follower election lease heartbeat checksum
	digest cursor pagination filter index snapshot compaction segment tombstone watermark
	cutover drift skew clock offset cursor lag queue batch stream chunk manifest registry
	catalog inventory template overlay profile baseline policy exemption approval review
	owner rotation renewal expiry revocation grace drain cordon taint affinity spread topology
	region zone failover fallback circuit breaker bulkhead canary shadow mirror replay backfill
	reindex rebuild warmup preload prefetch throttle admission priority fairness preemption
	deadline retry idempotency dedup ordering sequence version schema contract adapter gateway
	proxy router balancer endpoint webhook callback subscription notification digest summary
	report export import archive purge cleanup garbage orphan leak profile flamegraph heap
	goroutine thread socket descriptor handle inode journal ledger audit trail evidence sample
	quantile histogram bucket outlier anomaly forecast capacity headroom saturation`)

// shared is the common technical vocabulary every document draws from.
var shared = f(`service config setting value default change request response error failure
	retry timeout limit update version deploy team owner check step command flag option file
	path key field header status code message event job task process host instance cluster
	environment production staging test build release run time minute hour day week percent
	number size count rate load traffic user customer client server database storage network
	dashboard alert log metric ticket incident runbook document guide review approval access
	permission role policy rule label name id list table entry record state health probe
	endpoint port url api library package module dependency image container resource quota
	memory cpu disk latency throughput capacity schedule window backup restore start stop
	restart enable disable create delete read write copy move sync cache queue worker`)

// verbs are base forms usable after "to" or "you".
var verbs = f(`check update rotate revoke restart drain scale enable disable verify inspect
	configure rebuild restore reset pause resume promote roll migrate tune raise lower
	export import audit renew replace split merge pin bump purge warm flush replay`)

// gerunds open titles; a pair of them sharing the rest of a title gives the near-duplicate
// documents that a router must tell apart.
var gerunds = []string{"Rotating", "Revoking", "Configuring", "Rolling back", "Scaling",
	"Debugging", "Migrating", "Restoring", "Tuning", "Monitoring", "Upgrading", "Enabling",
	"Disabling", "Auditing", "Testing", "Troubleshooting", "Provisioning", "Sizing", "Draining",
	"Replaying", "Renewing", "Pausing", "Exporting", "Purging"}

// nouns close titles that do not start with a gerund.
var nouns = f(`limits runbook checklist defaults timeouts policy schedule procedure overview
	quotas alerts errors settings ownership budget retention thresholds playbook`)

var (
	onsets = f(`b c d f g h j k l m n p r s t v w z br cr dr fr gr kl pl pr st tr vr sk sn`)
	vowels = f(`a e i o u`)
	// codas end every invented word in a letter no English suffix rule touches, so a word
	// stems to itself and a known-item question matches it exactly.
	codas = f(`x k z nk rk lk sk`)
)

// f splits a word list, dropping repeats so every pool draws each word with equal weight.
func f(s string) []string {
	var out []string
	seen := map[string]bool{}
	for _, w := range strings.Fields(s) {
		if !seen[w] {
			seen[w] = true
			out = append(out, w)
		}
	}
	return out
}
