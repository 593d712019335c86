package main

import (
	"context"
	"math"
	"os"
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
			s, err := start(p, bins, bins, false)
			if err != nil {
				t.Fatal(err)
			}
			defer s.stop()
			cases := []loadgen.Config{
				{Scenario: loadgen.Echo, URL: s.url("/echo"), Conns: 2, Size: 100, Text: true, InFlight: 2},
				{Scenario: loadgen.Throughput, URL: s.url("/echo"), Size: 70000},
			}
			if !p.Verbatim {
				cases = append(cases, loadgen.Config{Scenario: loadgen.Chat, URL: s.url("/chat"), Conns: 3, Size: 20000, InFlight: 2})
			}
			for _, cfg := range cases {
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
