package journal

import (
	"errors"
	"fmt"
	"time"

	"github.com/waybill/waybill/lifecycle"
)

// SourceCreated: a source was added.
type SourceCreated struct {
	Source lifecycle.Source `json:"source"`
}

func (*SourceCreated) Kind() Kind        { return KindSourceCreated }
func (p *SourceCreated) Text() string    { return "source created: " + p.Source.Name }
func (p *SourceCreated) Validate() error { return p.Source.Validate() }

// SourceUpdated: a source was changed; Source is the whole new definition.
type SourceUpdated struct {
	Source lifecycle.Source `json:"source"`
}

func (*SourceUpdated) Kind() Kind        { return KindSourceUpdated }
func (p *SourceUpdated) Text() string    { return "source updated: " + p.Source.Name }
func (p *SourceUpdated) Validate() error { return p.Source.Validate() }

// SourceDeleted: a source was removed, with its progress.
type SourceDeleted struct {
	Name string `json:"name"`
}

func (*SourceDeleted) Kind() Kind        { return KindSourceDeleted }
func (p *SourceDeleted) Text() string    { return "source deleted: " + p.Name }
func (p *SourceDeleted) Validate() error { return lifecycle.CheckName("name", p.Name) }

// SourceHolePassed: an inbox_table source passed the ids From to To, which
// were missing from the table for longer than MaxCommitDelay, as a
// permanent hole (an upstream transaction that rolled back), so that its
// watermark moves on over them.
type SourceHolePassed struct {
	Source string `json:"source"`
	From   int64  `json:"from"`
	To     int64  `json:"to"`
	// MissingSince is when the source first saw the ids missing below a
	// row that exists.
	MissingSince   time.Time          `json:"missing_since"`
	MaxCommitDelay lifecycle.Duration `json:"max_commit_delay"`
}

func (*SourceHolePassed) Kind() Kind { return KindSourceHolePassed }
func (p *SourceHolePassed) Text() string {
	ids := fmt.Sprintf("id %d", p.From)
	if p.To != p.From {
		ids = fmt.Sprintf("ids %d to %d", p.From, p.To)
	}
	return fmt.Sprintf("source %s passed %s as a permanent hole: missing since %s, longer than max_commit_delay %s",
		p.Source, ids, stamp(p.MissingSince), p.MaxCommitDelay)
}
func (p *SourceHolePassed) Validate() error {
	var errs []error
	if p.From < 1 || p.To < p.From {
		errs = append(errs, field("to", fmt.Sprintf("ids %d to %d: must be 1 or more, from the lower to the higher", p.From, p.To)))
	}
	if p.MaxCommitDelay <= 0 {
		errs = append(errs, field("max_commit_delay", "must be positive"))
	}
	return errors.Join(append(errs, lifecycle.CheckName("source", p.Source),
		required("missing_since", !p.MissingSince.IsZero()))...)
}
