package main

import (
	"bytes"
	"os"
	"runtime/debug"
	"strings"
	"testing"
)

func TestServeRefusesBadLimitsWithAClearErrorAndExit2(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--echo-max-message-bytes", "-5"}, `invalid value "-5" for --echo-max-message-bytes: "-5" is not a size`},
		{[]string{"--echo-max-message-bytes", "0"}, "0 is out of range: want 1 to 1GiB"},
		{[]string{"--echo-max-message-bytes", "2GiB"}, "2GiB is out of range: want 1 to 1GiB"},
		{[]string{"--max-header-bytes", "100"}, "100 is out of range: want 1KiB to 1MiB"},
		{[]string{"--max-header-bytes", "16 furlongs"}, `"16 furlongs" is not a size (a whole number of bytes, optionally with a unit`},
		{[]string{"--max-pending-handshakes", "0"}, "0 is out of range: want 1 to 1048576"},
		{[]string{"--max-pending-handshakes", "many"}, `"many" is not a whole number`},
		{[]string{"--memory-limit", "1MiB"}, "1MiB is out of range: want 32MiB to"},
		{[]string{"--memory-limit", "1000000TiB"}, "is out of range"},
		{[]string{"--memory-limit", "99999999999999999999"}, "is too large"},
	} {
		var out, errOut bytes.Buffer
		if code := run(append([]string{"serve"}, tc.args...), &out, &errOut); code != 2 {
			t.Errorf("%v: exit %d, want 2", tc.args, code)
		}
		if !strings.Contains(errOut.String(), tc.want) {
			t.Errorf("%v: message %q, want it to say %q", tc.args, firstLineOf(errOut.String()), tc.want)
		}
	}
}

func firstLineOf(s string) string {
	l, _, _ := strings.Cut(s, "\n")
	return l
}

func TestServeLimitsComeFromTheEnvironmentToo(t *testing.T) {
	t.Setenv("RALLY_ECHO_MAX_MESSAGE_BYTES", "-1")
	var out, errOut bytes.Buffer
	if code := run([]string{"serve"}, &out, &errOut); code != 2 {
		t.Fatalf("exit %d, want 2", code)
	}
	if !strings.Contains(errOut.String(), "RALLY_ECHO_MAX_MESSAGE_BYTES") {
		t.Errorf("message %q does not name the variable", errOut.String())
	}
}

// protectConfigFile sets every flag of protectFlags in a config file, none
// at its default; protectConfigChecks says whether each was set.
const protectConfigFile = `nats-user = "u"
nats-password = "p"
nats-token = "t"
nats-nkey = "seed.nk"
nats-creds = "x.creds"
nats-ca = "ca.pem"
nats-cert = "nc.pem"
nats-key = "nk.pem"
nats-cluster-user = "cu"
nats-cluster-password = "cp"
nats-ready = true
cluster-secret = "0123456789abcdef"
memory-limit = "64MiB"
max-header-bytes = 8192
max-pending-handshakes = 10
echo-max-message-bytes = "2MiB"
ops-addr = "127.0.0.1:9998"
`

func protectConfigChecks(s *serveSetup) map[string]bool {
	c := s.cfg
	return map[string]bool{
		"nats-user":              c.NATS.User == "u",
		"nats-password":          c.NATS.Password == "p",
		"nats-token":             c.NATS.Token == "t",
		"nats-nkey":              c.NATS.NKeySeed == "seed.nk",
		"nats-creds":             c.NATS.Creds == "x.creds",
		"nats-ca":                c.NATS.TLSCA == "ca.pem",
		"nats-cert":              c.NATS.TLSCert == "nc.pem",
		"nats-key":               c.NATS.TLSKey == "nk.pem",
		"nats-cluster-user":      c.NATS.ClusterUser == "cu",
		"nats-cluster-password":  c.NATS.ClusterPassword == "cp",
		"nats-ready":             c.ReadyNeedsNATS,
		"cluster-secret":         c.NATS.ClusterSecret == "0123456789abcdef",
		"memory-limit":           c.MemoryLimit == 64<<20,
		"max-header-bytes":       c.MaxHeaderBytes == 8192,
		"max-pending-handshakes": c.MaxPendingHandshakes == 10,
		"echo-max-message-bytes": c.EchoMaxMessageBytes == 2<<20,
		"ops-addr":               c.OpsAddr == "127.0.0.1:9998",
	}
}

// The Go runtime's soft limit leaves headroom under --memory-limit for
// what it does not count (the executable's pages) and for its overshoot,
// so that RSS stays under the limit.
func TestTheRuntimesSoftLimitLeavesHeadroomUnderTheMemoryLimit(t *testing.T) {
	for _, tc := range []struct{ limit, want int64 }{
		{512 << 20, 480 << 20},
		{128 << 20, 112 << 20},
		{32 << 20, 16 << 20},
		{8 << 30, 7680 << 20},
	} {
		if got := runtimeMemoryLimit(tc.limit); got != tc.want {
			t.Errorf("runtimeMemoryLimit(%d MiB) = %d MiB, want %d MiB", tc.limit>>20, got>>20, tc.want>>20)
		}
	}
	if os.Getenv("GOMEMLIMIT") != "" {
		t.Skip("GOMEMLIMIT is set: the server leaves the runtime's limit to it")
	}
	before := debug.SetMemoryLimit(-1)
	defer debug.SetMemoryLimit(before)
	setRuntimeMemoryLimit(512 << 20)
	if got := debug.SetMemoryLimit(-1); got != 480<<20 {
		t.Errorf("the runtime's soft limit for --memory-limit 512MiB is %d MiB, want 480 MiB", got>>20)
	}
}

// rally serve collects garbage once the heap has grown by half of what is
// live (GOGC=50), not by all of it, unless the GOGC environment variable
// says otherwise.
func TestServeSetsItsGCPercentUnlessGOGCIsSet(t *testing.T) {
	defer debug.SetGCPercent(debug.SetGCPercent(100))
	t.Setenv("GOGC", "")
	setGCPercent()
	if got := debug.SetGCPercent(100); got != serveGCPercent {
		t.Errorf("without GOGC: GC percent %d, want %d", got, serveGCPercent)
	}
	t.Setenv("GOGC", "200")
	setGCPercent()
	if got := debug.SetGCPercent(100); got != 100 {
		t.Errorf("with GOGC set: GC percent changed to %d", got)
	}
}
