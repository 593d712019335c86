package server

import (
	"fmt"
	"strings"
	"testing"

	"github.com/rallyws/rally"
)

func TestSubscriptionsAreChargedToTheMemoryBudgetAndOnePastItIsRefusedWithLimit(t *testing.T) {
	budget := rally.NewMemoryBudget(1 << 30)
	s := serve(t, Config{Protection: Protection{MemoryBudget: budget}})
	const charged = `rally_memory_budget_used_bytes{category="subscriptions"}`
	c := dial(t, s.ws+"/ws", nil)
	// Subscriptions may take 75% of the budget with what else connections
	// hold: leave them about 20 KiB of it.
	held := int64(1<<30)/100*75 - 20<<10
	if !budget.Reserve(rally.MemoryHandshakes, held) {
		t.Fatal("reserve refused")
	}
	defer budget.Release(rally.MemoryHandshakes, held)
	long := strings.Repeat("x", MaxTopicLength-3)
	var refused string
	for i := range 100 {
		c.send(fmt.Sprintf(`{"type":"subscribe","topic":"%s%03d","id":%d}`, long, i, i))
		if got := c.next(); got != fmt.Sprintf(`{"type":"ack","id":%d}`, i) {
			refused = got
			break
		}
	}
	if !strings.Contains(refused, `"code":"limit"`) || !strings.Contains(refused, "memory budget") {
		t.Fatalf("subscribing past the budget: %q, want a limit error naming the memory budget", refused)
	}
	if got := metric(t, s.http, charged); got <= 0 {
		t.Fatalf("%s = %v with subscriptions held", charged, got)
	}
	if got := metric(t, s.http, `rally_limit_refusals_total{limit="subscriptions_memory"}`); got != 1 {
		t.Errorf("subscriptions refused for memory: %v, want 1", got)
	}
	c.c.CloseNow()
	awaitMetric(t, s.http, charged, 0)
}
