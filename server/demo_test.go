package server

import (
	"context"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
)

// TestTwoBrowserPagesChatThroughTheDemoPage opens the demo page in two
// tabs of headless Chromium, joins both to one topic, sends from one and
// sees the message in both, with the live counters showing two
// connections.
func TestTwoBrowserPagesChatThroughTheDemoPage(t *testing.T) {
	if testing.Short() {
		t.Skip("starts Chromium; run without -short")
	}
	ts := serve(t, Config{})
	browser := chromium(t)
	ann := browser
	bob, closeBob := chromedp.NewContext(browser)
	defer closeBob()

	join := func(ctx context.Context, name string) {
		t.Helper()
		if err := chromedp.Do(ctx,
			chromedp.Navigate(ts.http+"/"),
			chromedp.WaitVisible(chromedp.CSS("#join-btn")),
			chromedp.SetValue(chromedp.CSS("#topic"), "demo-room"),
			chromedp.SetValue(chromedp.CSS("#name"), name),
			chromedp.Click(chromedp.CSS("#join-btn")),
			chromedp.WaitVisible(chromedp.CSS(`#status[data-state="joined"]`)),
		); err != nil {
			t.Fatalf("%s joining: %v", name, err)
		}
	}
	join(ann, "ann")
	join(bob, "bob")

	if err := chromedp.Do(bob,
		chromedp.SetValue(chromedp.CSS("#text"), "hello from bob"),
		chromedp.Click(chromedp.CSS("#send-btn")),
	); err != nil {
		t.Fatalf("bob sending: %v", err)
	}
	for name, ctx := range map[string]context.Context{"ann": ann, "bob": bob} {
		if err := chromedp.Do(ctx, chromedp.WaitVisible(chromedp.Search(`//ul[@id="log"]/li[contains(., "hello from bob")]`))); err != nil {
			t.Fatalf("%s waiting for the message: %v", name, err)
		}
		text, err := chromedp.Run(ctx, chromedp.Text(chromedp.CSS("#log")))
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(text, "bob:") || strings.Count(text, "hello from bob") != 1 {
			t.Errorf("%s's log reads %q, want bob's message once", name, text)
		}
	}
	// The live counters come from the server.
	if err := chromedp.Do(ann, chromedp.Poll[chromedp.Void](
		`document.getElementById("c-connections").textContent === "2" && document.getElementById("c-publishes").textContent === "1"`,
		chromedp.WithPollingTimeout(15*time.Second))); err != nil {
		t.Fatalf("the counters never showed 2 connections and 1 publish: %v", err)
	}
}

// chromium starts a headless Chromium ($CHROMIUM, else /usr/bin/chromium)
// and returns its first tab; both end with the test.
func chromium(t *testing.T) context.Context {
	t.Helper()
	path := os.Getenv("CHROMIUM")
	if path == "" {
		path = "/usr/bin/chromium"
	}
	if _, err := os.Stat(path); err != nil {
		t.Fatalf("Chromium not found at %s: install Debian's chromium (`bash interop/setup.sh`) or set $CHROMIUM", path)
	}
	limit, cancelLimit := context.WithTimeout(context.Background(), 90*time.Second)
	alloc, cancelAlloc := chromedp.NewExecAllocator(limit,
		chromedp.ExecPath(path),
		chromedp.Flag("headless", true),
		chromedp.NoSandbox,
		chromedp.DisableGPU,
		chromedp.NoFirstRun,
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.UserDataDir(t.TempDir()),
	)
	ctx, cancelCtx := chromedp.NewContext(alloc)
	t.Cleanup(func() {
		cancelCtx()
		cancelAlloc() // waits for the browser to exit
		cancelLimit()
	})
	// Start the browser now, so that tabs made from ctx open in it.
	if err := chromedp.Do(ctx); err != nil {
		t.Fatalf("starting Chromium: %v", err)
	}
	return ctx
}
