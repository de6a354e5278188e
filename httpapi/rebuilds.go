package httpapi

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"sync"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/waybill/waybill/commands"
	"github.com/waybill/waybill/projection"
	"github.com/waybill/waybill/service"
)

// Rebuilds runs the online rebuilds a server starts, through the API or
// the console, and keeps where each stands, in memory: a rebuild runs
// once on the database whichever server starts it (schema.LockOnline),
// and a second fails at once, saying why.
type Rebuilds struct {
	db  *pgxpool.Pool
	log *slog.Logger
	now func() time.Time
	// pause is the runs' projection.OnlineOptions.Pause, which a test sets.
	pause func(projection.OnlinePhase)

	mu     sync.Mutex
	runs   map[uuid.UUID]*Rebuild
	latest uuid.UUID
}

// NewRebuilds returns the rebuilds of a server on db, timed by base's
// clock; give the API and the console the same one.
func NewRebuilds(base service.Base, db *pgxpool.Pool) *Rebuilds {
	base = base.WithDefaults()
	// Its times are shown to the microsecond, as the API's others are.
	now := func() time.Time { return base.Now().UTC().Truncate(time.Microsecond) }
	return &Rebuilds{db: db, log: base.Logger, now: now, runs: map[uuid.UUID]*Rebuild{}}
}

// Start starts an online rebuild in this process for operator and returns
// where it stands. It outlives the request that started it and ends with
// the process, harmlessly (the next run starts over).
func (rs *Rebuilds) Start(operator string) Rebuild {
	run := &Rebuild{ID: uuid.New(), Phase: projection.PhaseFold, StartedBy: operator, StartedAt: rs.now()}
	rs.mu.Lock()
	rs.runs[run.ID], rs.latest = run, run.ID
	answer := *run
	rs.mu.Unlock()
	rs.log.Info("online rebuild started", "rebuild_id", run.ID, "operator", operator)
	go func() {
		report, err := rs.run(run)
		rs.mu.Lock()
		defer rs.mu.Unlock()
		end := rs.now()
		run.FinishedAt = &end
		if err != nil {
			msg := err.Error()
			run.Phase, run.Error = projection.PhaseFailed, &msg
			rs.log.Error("online rebuild failed", "rebuild_id", run.ID, "err", err)
			return
		}
		n := len(report.Violations)
		run.Phase, run.Violations = projection.PhaseDone, &n
		rs.log.Info("online rebuild done", "rebuild_id", run.ID, "violations", n)
	}()
	return answer
}

// run runs the online rebuild of run, keeping where it stands. A panic in
// it is its error, logged with its stack: it fails the rebuild, not the
// process.
func (rs *Rebuilds) run(run *Rebuild) (report *projection.Report, err error) {
	defer service.Recovered(rs.log.With("rebuild_id", run.ID), "online rebuild", &err)
	return projection.OnlineRebuild(context.Background(), rs.db, projection.OnlineOptions{Log: rs.log, Pause: rs.pause,
		Progress: func(p projection.OnlineProgress) {
			rs.mu.Lock()
			defer rs.mu.Unlock()
			run.Events, run.Total, run.Lag, run.Rounds = p.Events, p.Total, p.Lag, p.Rounds
			// The end is set by Start, with what it found, at once.
			if p.Phase != projection.PhaseDone && p.Phase != projection.PhaseFailed {
				run.Phase = p.Phase
			}
			if p.LockHeld > 0 {
				ms := p.LockHeld.Milliseconds()
				run.LockHeldMs = &ms
			}
		}})
}

// Get is where the rebuild id stands, false when this server started none
// of that id.
func (rs *Rebuilds) Get(id uuid.UUID) (Rebuild, bool) {
	rs.mu.Lock()
	defer rs.mu.Unlock()
	run := rs.runs[id]
	if run == nil {
		return Rebuild{}, false
	}
	return *run, true
}

// Latest is where the last rebuild this server started stands, false
// when it started none.
func (rs *Rebuilds) Latest() (Rebuild, bool) {
	rs.mu.Lock()
	id := rs.latest
	rs.mu.Unlock()
	return rs.Get(id)
}

// startRebuild starts an online rebuild in this process and answers 202
// with where it stands.
func (s *Server) startRebuild(w http.ResponseWriter, r *http.Request) error {
	run := s.cfg.Rebuilds.Start(identity(r).Name)
	w.Header().Set("Location", Prefix+"/rebuilds/"+run.ID.String())
	writeJSON(w, http.StatusAccepted, run)
	return nil
}

// getRebuild answers where an online rebuild this server started stands;
// the id "latest" names the last it started.
func (s *Server) getRebuild(w http.ResponseWriter, r *http.Request) error {
	var (
		run   Rebuild
		found bool
	)
	if r.PathValue("id") == "latest" {
		run, found = s.cfg.Rebuilds.Latest()
	} else {
		id, err := pathID(r, "id")
		if err != nil {
			return err
		}
		run, found = s.cfg.Rebuilds.Get(id)
	}
	if !found {
		return fmt.Errorf("online rebuild %s, of this server: %w", r.PathValue("id"), commands.ErrNotFound)
	}
	writeJSON(w, http.StatusOK, run)
	return nil
}

// Rebuild is an online rebuild a server started (POST /rebuilds) and
// where it stands.
type Rebuild struct {
	ID uuid.UUID `json:"id"`
	// Phase is fold, catch_up, switch, audit, then done or failed.
	Phase projection.OnlinePhase `json:"phase"`
	// Events is the journal events folded so far, Total those of the
	// fold's snapshot; Lag those the last catch-up round read; Rounds the
	// catch-up rounds so far.
	Events int `json:"events"`
	Total  int `json:"total"`
	Lag    int `json:"lag"`
	Rounds int `json:"rounds"`
	// LockHeldMs is how long the switch held the live tables; null
	// before it.
	LockHeldMs *int64 `json:"lock_held_ms"`
	// Violations is what the audit of the new tables found, once done.
	Violations *int `json:"violations"`
	// Error is why a failed rebuild failed; null otherwise.
	Error      *string    `json:"error"`
	StartedBy  string     `json:"started_by"`
	StartedAt  time.Time  `json:"started_at"`
	FinishedAt *time.Time `json:"finished_at"`
}
