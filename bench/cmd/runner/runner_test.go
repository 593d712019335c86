package main

import (
	"context"
	"math"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/rallyws/rally/loadgen"
)

func TestMedianOfOddAndEvenCountsAndRatioOfMissingValues(t *testing.T) {
	if m := median([]float64{3, 1, 2}); m != 2 {
		t.Errorf("median of 3 values = %v", m)
	}
	if m := median([]float64{4, 1, 3, 2}); m != 2.5 {
		t.Errorf("median of 4 values = %v", m)
	}
	if !math.IsNaN(median(nil)) {
		t.Error("median of nothing is a number")
	}
	if r := ratio(3, 2); r != "1.50x" {
		t.Errorf("ratio(3, 2) = %q", r)
	}
	if r := ratio(math.NaN(), 2); r != "-" {
		t.Errorf("ratio of a missing value = %q", r)
	}
}

func TestScenarioIDsAreUniqueAndBurstRoundsQueueMegabytesPerReceiver(t *testing.T) {
	seen := map[string]bool{}
	bursts := 0
	for _, sc := range scenarios(1000, 4) {
		if seen[sc.ID] {
			t.Errorf("scenario id %q appears twice: its results and chart would mix", sc.ID)
		}
		seen[sc.ID] = true
		if !strings.HasSuffix(sc.ID, "-burst") {
			continue
		}
		bursts++
		c := sc.Cfg
		if perRound := c.Conns * c.InFlight * c.Size; c.Scenario != loadgen.Chat || c.InFlight != 8 || perRound < 4<<20 {
			t.Errorf("%s: %s, %d per client per round, %d bytes to each receiver per round; want chat, 8, >= 4 MiB",
				sc.ID, c.Scenario, c.InFlight, perRound)
		}
	}
	if !seen["chat-16KiB-text-burst"] || !seen["chat-64KiB-binary-burst"] || bursts != 2 {
		t.Errorf("burst scenarios: %v", seen)
	}
}

// TestEveryGoPeerEchoesAndDeliversToTheWholeRoom builds the Go peers and
// drives each briefly: a peer that answers wrongly would make every
// figure of the comparison meaningless.
func TestEveryGoPeerEchoesAndDeliversToTheWholeRoom(t *testing.T) {
	if testing.Short() {
		t.Skip("builds every peer")
	}
	if err := os.Chdir("../.."); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.Chdir("cmd/runner") })
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	var list []*peer
	for i := range peers {
		if p := &peers[i]; p.Kind == "go" && p.Pending == "" {
			list = append(list, p)
		}
	}
	bins := t.TempDir()
	if err := build(ctx, list, bins); err != nil {
		t.Fatal(err)
	}
	for _, p := range list {
		t.Run(p.Name, func(t *testing.T) {
			cases := []loadgen.Config{
				{Scenario: loadgen.Echo, URL: "/echo", Conns: 2, Size: 100, Text: true, InFlight: 2},
				{Scenario: loadgen.Throughput, URL: "/echo", Size: 70000},
			}
			if !p.Verbatim {
				cases = append(cases,
					loadgen.Config{Scenario: loadgen.Chat, URL: "/chat", Conns: 3, Size: 20000, InFlight: 2},
					// A burst round, as the -burst scenarios send: every
					// receiver's queue takes 4 x 8 x 64 KiB at once.
					loadgen.Config{Scenario: loadgen.Chat, URL: "/chat", Conns: 4, Size: 64 << 10, InFlight: 8})
			}
			for _, cfg := range cases {
				// A server per case: a chat room that still relays what the
				// previous case's clients sent before they left would hand
				// those messages to the next case's clients.
				s, err := start(p, bins, bins, false)
				if err != nil {
					t.Fatal(err)
				}
				defer s.stop()
				cfg.URL = s.url(cfg.URL)
				cfg.Duration, cfg.Warmup, cfg.VerbatimEcho = 200*time.Millisecond, -1, p.Verbatim
				res, err := loadgen.Run(ctx, cfg)
				if err != nil {
					t.Fatalf("%s: %v", cfg.Scenario, err)
				}
				if res.Errors != 0 || res.Messages == 0 {
					t.Errorf("%s: %d messages, %d errors %v", cfg.Scenario, res.Messages, res.Errors, res.ErrorSamples)
				}
			}
		})
	}
}

// TestEveryPeerThatSupportsDeflateNegotiatesItWhenStartedWithCompress
// starts each Go peer marked Compress with -compress and checks that every
// connection of an echo and a chat negotiates permessage-deflate and gets
// correct replies: a compressed scenario measured on uncompressed
// connections would carry the wrong title.
func TestEveryPeerThatSupportsDeflateNegotiatesItWhenStartedWithCompress(t *testing.T) {
	if testing.Short() {
		t.Skip("builds every peer")
	}
	if err := os.Chdir("../.."); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.Chdir("cmd/runner") })
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	var list []*peer
	for i := range peers {
		if p := &peers[i]; p.Kind == "go" && p.Pending == "" && p.Compress {
			list = append(list, p)
		}
	}
	bins := t.TempDir()
	if err := build(ctx, list, bins); err != nil {
		t.Fatal(err)
	}
	for _, p := range list {
		t.Run(p.Name, func(t *testing.T) {
			s, err := start(p, bins, bins, true)
			if err != nil {
				t.Fatal(err)
			}
			defer s.stop()
			for _, cfg := range []loadgen.Config{
				{Scenario: loadgen.Echo, URL: s.url("/echo"), Conns: 2, Size: 2000, Text: true, InFlight: 2},
				{Scenario: loadgen.Chat, URL: s.url("/chat"), Conns: 3, Size: 1000, Text: true, InFlight: 2},
			} {
				cfg.Compress, cfg.Duration, cfg.Warmup = true, 200*time.Millisecond, -1
				res, err := loadgen.Run(ctx, cfg)
				if err != nil {
					t.Fatalf("%s: %v", cfg.Scenario, err)
				}
				if res.CompressedConns != int64(cfg.Conns) || res.Errors != 0 || res.Messages == 0 {
					t.Errorf("%s: deflate on %d of %d connections, %d messages, %d errors %v",
						cfg.Scenario, res.CompressedConns, cfg.Conns, res.Messages, res.Errors, res.ErrorSamples)
				}
			}
		})
	}
}

func TestClassifySumsFlatSamplesByKindOfWork(t *testing.T) {
	top := []byte(`Showing nodes accounting for 2s, 100% of 2s total
      flat  flat%   sum%        cum   cum%
     1.00s 50.00% 50.00%      1.00s 50.00%  internal/runtime/syscall/linux.Syscall6
     0.40s 20.00% 70.00%      0.40s 20.00%  runtime.memmove
     200ms 10.00% 80.00%      200ms 10.00%  github.com/rallyws/rally/frame.unmaskLookupAVX2
     0.20s 10.00% 90.00%      0.30s 15.00%  runtime.schedule
     0.10s  5.00% 95.00%      0.10s  5.00%  runtime.scanobject
     0.10s  5.00%   100%      1.90s 95.00%  github.com/rallyws/rally.(*Conn).serve
         0     0%   100%      1.00s 50.00%  syscall.RawSyscall6
`)
	want := "Where the CPU goes (flat samples by function): syscalls 50%, copy 20%, mask 0%, validate 10%, inflate 0%, runtime/GC 5%, scheduler 10%, rally and other 5%\n"
	if got := classify(top); got != want {
		t.Fatalf("classify:\n%s\nwant\n%s", got, want)
	}
}
