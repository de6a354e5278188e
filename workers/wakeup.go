package workers

import (
	"log/slog"

	"github.com/google/uuid"
	"github.com/nats-io/nats.go"

	"github.com/waybill/waybill/commands"
)

// DeliverySubject is the subject of a target's wake-ups. Target names are
// checked names (lifecycle.CheckName), so one is always one subject token.
func DeliverySubject(target string) string { return "waybill.delivery." + target }

// Publisher puts committed wake-ups on NATS; it is the Writer's Notifier.
type Publisher struct {
	nc      *nats.Conn
	log     *slog.Logger
	metrics *Metrics
}

// NewPublisher returns a Publisher on nc. metrics may be nil.
func NewPublisher(nc *nats.Conn, log *slog.Logger, metrics *Metrics) *Publisher {
	if log == nil {
		log = slog.Default()
	}
	return &Publisher{nc: nc, log: log, metrics: metrics.orNop()}
}

var _ commands.Notifier = (*Publisher)(nil)

// Notify publishes one wake-up per delivery. NATS buffers publishes, so this
// does not wait on the network; a publish that fails is a debug line and a
// counted metric, never an error: the sweep wakes the delivery again.
func (p *Publisher) Notify(wakeups []commands.Wakeup) {
	for _, w := range wakeups {
		if err := p.nc.Publish(DeliverySubject(w.Target), []byte(w.DeliveryID.String())); err != nil {
			p.metrics.wakeupsFailed.WithLabelValues(w.Target).Inc()
			p.log.Debug("wake-up not published", "delivery_id", w.DeliveryID, "target", w.Target, "err", err)
			continue
		}
		p.metrics.wakeupsPublished.WithLabelValues(w.Target).Inc()
	}
}

// parseWakeup reads the delivery id a wake-up names.
func parseWakeup(data []byte) (uuid.UUID, error) { return uuid.ParseBytes(data) }
