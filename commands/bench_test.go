package commands_test

import (
	"testing"
	"time"

	"github.com/waybill/waybill/lifecycle"
)

func BenchmarkIngestTwoTargets(b *testing.B) {
	bd := setup(b)
	bd.targets(b, "alpha", "beta")
	for b.Loop() {
		if _, _, err := bd.w.Ingest(bd.ctx, newMessage()); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkClaimComplete(b *testing.B) {
	bd := setup(b)
	bd.targets(b, "alpha")
	for b.Loop() {
		b.StopTimer()
		m, _, err := bd.w.Ingest(bd.ctx, newMessage())
		if err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
		d := m.Deliveries[0]
		c, err := bd.w.Claim(bd.ctx, d.ID, time.Minute)
		if err != nil {
			b.Fatal(err)
		}
		if _, err := bd.w.Complete(bd.ctx, d.ID, c.Token, lifecycle.Delivered("200")); err != nil {
			b.Fatal(err)
		}
	}
}
