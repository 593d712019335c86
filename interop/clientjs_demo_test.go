package interop_test

import (
	"strings"
	"testing"

	"github.com/chromedp/chromedp"
)

// The demo page, through the JavaScript client, survives a network drop:
// it says it is reconnecting, comes back by itself, says the missed
// message was recovered, and shows it once.
func TestDemoPageRecoversWhatWasPublishedWhileTheNetworkWasDown(t *testing.T) {
	inModes(t, func(t *testing.T, mode serverMode) {
		srv := startRallyServe(t, mode, historyConfig(100))
		proxy := newCutProxy(t, srv.addr)
		ctx := startBrowser(t, "http://"+proxy.Addr()+"/")
		step := func(what string, actions ...chromedp.Action[chromedp.Void]) {
			t.Helper()
			if err := chromedp.Do(ctx, actions...); err != nil {
				t.Fatalf("%s: %v", what, err)
			}
		}
		step("joining",
			chromedp.SetValue(chromedp.CSS("#topic"), "lobby"),
			chromedp.Click(chromedp.CSS("#join-btn")),
			chromedp.WaitVisible(chromedp.CSS(`#status[data-state="joined"]`)),
		)
		publishHTTP(t, srv.addr, "lobby", "before the drop")
		step("the first message", chromedp.WaitVisible(chromedp.Search(`//ul[@id="log"]/li[contains(., "before the drop")]`)))

		proxy.Cut()
		step("the drop", chromedp.WaitVisible(chromedp.Search(`//div[@id="status"][contains(., "Reconnecting")]`)))
		publishHTTP(t, srv.addr, "lobby", "while away")
		proxy.Restore()
		step("coming back",
			chromedp.WaitVisible(chromedp.CSS(`#status[data-state="joined"]`)),
			chromedp.WaitVisible(chromedp.Search(`//ul[@id="log"]/li[contains(., "1 missed message(s) recovered")]`)),
			chromedp.WaitVisible(chromedp.Search(`//ul[@id="log"]/li[contains(., "while away")]`)),
		)
		text, err := chromedp.Run(ctx, chromedp.Text(chromedp.CSS("#log")))
		if err != nil {
			t.Fatal(err)
		}
		if strings.Count(text, "while away") != 1 || strings.Count(text, "before the drop") != 1 {
			t.Fatalf("the log reads %q, want each message once", text)
		}
	})
}
