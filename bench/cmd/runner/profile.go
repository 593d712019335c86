package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/rallyws/rally/loadgen"
)

// profileSeconds is how long the server's CPU is sampled.
const profileSeconds = 5

// profile runs one scenario on rally alone while the server samples its
// own CPU (net/http/pprof), and saves rally-ID.pprof and rally-ID-top.txt
// (the pprof top) in the charts directory.
func profile(ctx context.Context, o options) error {
	var sc *scenario
	for _, s := range scenarios(o.idleConns, o.inflight) {
		if s.ID == o.profile {
			sc = &s
		}
	}
	if sc == nil || sc.Cfg.Scenario == loadgen.Idle {
		return fmt.Errorf("-profile %q: want the id of a loaded scenario, such as chat-16B-text", o.profile)
	}
	var p *peer
	for i := range peers {
		if peers[i].Name == o.profilePeer {
			p = &peers[i]
		}
	}
	if p == nil || !strings.HasPrefix(p.Name, "rally") {
		return fmt.Errorf("-profile-peer %q: want rally, rally-loop, rally-hub or rally-hub-loop", o.profilePeer)
	}
	tmp, err := os.MkdirTemp("", "rally-bench-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	if err := build(ctx, []*peer{p}, tmp); err != nil {
		return err
	}
	s, err := start(p, tmp, tmp, sc.Cfg.Compress)
	if err != nil {
		return err
	}
	defer s.stop()
	if err := os.MkdirAll(o.charts, 0o755); err != nil {
		return err
	}
	out := filepath.Join(o.charts, p.Name+"-"+sc.ID+".pprof")
	fetched := make(chan error, 1)
	go func() {
		// The load warms up for o.warmup before the profile starts.
		time.Sleep(o.warmup)
		fetched <- fetchProfile(ctx, fmt.Sprintf("http://127.0.0.1:%d/debug/pprof/profile?seconds=%d", s.port, profileSeconds), out)
	}()
	cfg := sc.Cfg
	path := "/echo"
	if cfg.Scenario == loadgen.Chat {
		path = "/chat"
	}
	cfg.URL, cfg.ServerPID = s.url(path), s.pid()
	cfg.Warmup, cfg.Duration = o.warmup, profileSeconds*time.Second+500*time.Millisecond
	res, err := loadgen.Run(ctx, cfg)
	if err != nil {
		return err
	}
	if err := <-fetched; err != nil {
		return err
	}
	top, err := exec.CommandContext(ctx, "go", "tool", "pprof", "-top", "-nodecount=40", filepath.Join(tmp, "rally"), out).Output()
	if err != nil {
		return fmt.Errorf("go tool pprof: %w", err)
	}
	all, err := exec.CommandContext(ctx, "go", "tool", "pprof", "-top", "-nodecount=100000", filepath.Join(tmp, "rally"), out).Output()
	if err != nil {
		return fmt.Errorf("go tool pprof: %w", err)
	}
	head := fmt.Sprintf("CPU profile of the %s peer in %s (%s), %d s under load:\n%s %s/s, server %.2f µs CPU per %s.\n%s\n",
		p.Name, sc.ID, sc.Title, profileSeconds, loadgen.Count(res.Rate), res.Unit, serverCPU(res), singular(res.Unit), classify(all))
	txt := filepath.Join(o.charts, p.Name+"-"+sc.ID+"-top.txt")
	if err := os.WriteFile(txt, append([]byte(head), top...), 0o644); err != nil {
		return err
	}
	fmt.Fprintf(os.Stderr, "wrote %s and %s\n", out, txt)
	return nil
}

func serverCPU(r *loadgen.Result) float64 {
	if r.Server == nil {
		return 0
	}
	return r.Server.CPUMicrosPerMessage
}

func fetchProfile(ctx context.Context, url, out string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("profile: %s", resp.Status)
	}
	f, err := os.Create(out)
	if err != nil {
		return err
	}
	if _, err := io.Copy(f, resp.Body); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}
