package httpapi

import (
	"context"
	"fmt"
	"net/http"
	"sync"
	"time"

	"github.com/google/uuid"

	"github.com/waybill/waybill/commands"
	"github.com/waybill/waybill/projection"
)

// rebuilds holds the online rebuilds this server started, for their
// progress; a rebuild runs once on the database whichever server starts
// it (schema.LockOnline), and a second fails at once, saying why.
type rebuilds struct {
	mu     sync.Mutex
	runs   map[uuid.UUID]*Rebuild
	latest uuid.UUID
}

// startRebuild starts an online rebuild in this process and answers 202
// with where it stands.
func (s *Server) startRebuild(w http.ResponseWriter, r *http.Request) error {
	now := s.cfg.Now()
	run := &Rebuild{ID: uuid.New(), Phase: projection.PhaseFold, StartedBy: identity(r).Name, StartedAt: now}
	s.rebuilds.mu.Lock()
	if s.rebuilds.runs == nil {
		s.rebuilds.runs = map[uuid.UUID]*Rebuild{}
	}
	s.rebuilds.runs[run.ID], s.rebuilds.latest = run, run.ID
	answer := *run
	s.rebuilds.mu.Unlock()
	s.log.Info("online rebuild started", "rebuild_id", run.ID, "operator", run.StartedBy)
	// It outlives the request; it ends with the process, harmlessly.
	ctx := context.WithoutCancel(r.Context())
	go func() {
		report, err := projection.OnlineRebuild(ctx, s.cfg.DB, projection.OnlineOptions{Log: s.log,
			Progress: func(p projection.OnlineProgress) {
				s.rebuilds.mu.Lock()
				defer s.rebuilds.mu.Unlock()
				run.Phase, run.Events, run.Lag, run.Rounds = p.Phase, p.Events, p.Lag, p.Rounds
				if p.LockHeld > 0 {
					ms := p.LockHeld.Milliseconds()
					run.LockHeldMs = &ms
				}
			}})
		s.rebuilds.mu.Lock()
		defer s.rebuilds.mu.Unlock()
		end := s.cfg.Now()
		run.FinishedAt = &end
		if err != nil {
			msg := err.Error()
			run.Phase, run.Error = projection.PhaseFailed, &msg
			s.log.Error("online rebuild failed", "rebuild_id", run.ID, "err", err)
			return
		}
		n := len(report.Violations)
		run.Violations = &n
		s.log.Info("online rebuild done", "rebuild_id", run.ID, "violations", n)
	}()
	w.Header().Set("Location", Prefix+"/rebuilds/"+run.ID.String())
	writeJSON(w, http.StatusAccepted, answer)
	return nil
}

// getRebuild answers where an online rebuild this server started stands;
// the id "latest" names the last it started.
func (s *Server) getRebuild(w http.ResponseWriter, r *http.Request) error {
	s.rebuilds.mu.Lock()
	id := s.rebuilds.latest
	s.rebuilds.mu.Unlock()
	if r.PathValue("id") != "latest" {
		var err error
		if id, err = pathID(r, "id"); err != nil {
			return err
		}
	}
	s.rebuilds.mu.Lock()
	run := s.rebuilds.runs[id]
	var answer Rebuild
	if run != nil {
		answer = *run
	}
	s.rebuilds.mu.Unlock()
	if run == nil {
		return fmt.Errorf("online rebuild %s, of this server: %w", r.PathValue("id"), commands.ErrNotFound)
	}
	writeJSON(w, http.StatusOK, answer)
	return nil
}

// Rebuild is an online rebuild a server started (POST /rebuilds) and
// where it stands.
type Rebuild struct {
	ID uuid.UUID `json:"id"`
	// Phase is fold, catch_up, switch, audit, then done or failed.
	Phase projection.OnlinePhase `json:"phase"`
	// Events is the journal events folded so far; Lag those the last
	// catch-up round read; Rounds the catch-up rounds so far.
	Events int `json:"events"`
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
