package httpapi

import (
	"context"
	"math"
	"net/http"
	"slices"

	"github.com/waybill/waybill/commands"
	"github.com/waybill/waybill/journal"
	"github.com/waybill/waybill/lifecycle"
	"github.com/waybill/waybill/projection"
)

// drySample is how many ids a dry run shows.
const drySample = 20

// The bounds of a page of operations and of refusals.
const (
	defaultOperationLimit = 50
	maxOperationLimit     = 500
)

// createOperation starts a bulk operation (202), or with dry_run decides
// what it would do to each message and writes nothing (200). Every field is checked
// before anything is read.
func (s *Server) createOperation(w http.ResponseWriter, r *http.Request) error {
	var req OperationRequest
	if err := s.readJSON(w, r, &req, false); err != nil {
		return err
	}
	spec, err := commands.CheckOperation(commands.OperationSpec{Action: req.Action, Filter: req.Filter, Reason: req.Reason})
	if err != nil {
		return err
	}
	if req.DryRun {
		pv, err := s.cfg.Writer.PreviewOperation(r.Context(), spec, identity(r).Name, drySample)
		if err != nil {
			return err
		}
		out := DryRunOf(pv)
		writeJSON(w, http.StatusOK, out)
		return nil
	}
	o, err := s.cfg.Writer.CreateOperation(r.Context(), spec, identity(r).Name)
	if err != nil {
		return err
	}
	if s.cfg.OnOperation != nil {
		s.cfg.OnOperation()
	}
	s.log.Info("bulk operation created", "operation_id", o.ID, "action", o.Action, "matched", o.Matched,
		"operator", identity(r).Name)
	out, err := s.operationOf(r.Context(), o)
	if err != nil {
		return err
	}
	w.Header().Set("Location", Prefix+"/operations/"+o.ID.String())
	writeJSON(w, http.StatusAccepted, out)
	return nil
}

// DryRunOf is the answer of a dry run that came to pv: its refusal
// classes counted by the code each answers.
func DryRunOf(pv *commands.Preview) DryRun {
	out := DryRun{Matched: pv.Matched, Sample: nonNil(pv.Sample), Decided: pv.Decided, Done: pv.Done, Refusals: []DryRunRefusals{}}
	at := map[string]int{}
	for _, c := range pv.Refused {
		out.Refused += c.Count
		// Classes are sentinels; two may answer one code.
		_, body := Refusal(c.Err)
		if i, ok := at[body.Code]; ok {
			out.Refusals[i].Count += c.Count
			continue
		}
		at[body.Code] = len(out.Refusals)
		out.Refusals = append(out.Refusals, DryRunRefusals{Code: body.Code, Count: c.Count, Example: c.Reason})
	}
	slices.SortStableFunc(out.Refusals, func(x, y DryRunRefusals) int { return y.Count - x.Count })
	return out
}

// listOperations pages the operations, newest first.
func (s *Server) listOperations(w http.ResponseWriter, r *http.Request) error {
	q := r.URL.Query()
	limit, err := limitOf(q, defaultOperationLimit, maxOperationLimit)
	errs := []error{err}
	var after *projection.OperationCursor
	if v := q.Get("cursor"); v != "" {
		c, err := projection.ParseOperationCursor(v)
		errs = append(errs, err)
		after = &c
	}
	if err := invalid(errs...); err != nil {
		return err
	}
	ops, next, err := projection.ListOperations(r.Context(), s.cfg.DB, limit, after)
	if err != nil {
		return err
	}
	out := OperationList{Items: make([]Operation, 0, len(ops))}
	for _, o := range ops {
		item, err := s.operationOf(r.Context(), o)
		if err != nil {
			return err
		}
		out.Items = append(out.Items, item)
	}
	if next != nil {
		c := next.String()
		out.NextCursor = &c
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

// getOperation answers the operation resource.
func (s *Server) getOperation(w http.ResponseWriter, r *http.Request) error {
	id, err := pathID(r, "id")
	if err != nil {
		return err
	}
	o, err := projection.LoadOperation(r.Context(), s.cfg.DB, id)
	if err != nil {
		return err
	}
	out, err := s.operationOf(r.Context(), o)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

// cancelOperation cancels a running operation: 200 with it, 409
// NOT_CANCELLABLE once it has ended.
func (s *Server) cancelOperation(w http.ResponseWriter, r *http.Request) error {
	id, err := pathID(r, "id")
	if err != nil {
		return err
	}
	var req CancelRequest
	if err := s.readJSON(w, r, &req, true); err != nil {
		return err
	}
	o, err := s.cfg.Writer.CancelOperation(r.Context(), id, identity(r).Name, req.Reason)
	if err != nil {
		return err
	}
	s.log.Info("bulk operation cancelled", "operation_id", o.ID, "done", o.Done, "refused", o.Refused,
		"operator", identity(r).Name)
	out, err := s.operationOf(r.Context(), o)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

// listRefusals pages an operation's refusals in the order it met them.
func (s *Server) listRefusals(w http.ResponseWriter, r *http.Request) error {
	id, err := pathID(r, "id")
	if err != nil {
		return err
	}
	q := r.URL.Query()
	limit, err := limitOf(q, defaultOperationLimit, maxOperationLimit)
	errs := []error{err}
	var after projection.RefusalAt
	if v := q.Get("cursor"); v != "" {
		var err error
		after, err = projection.ParseRefusalAt(v)
		errs = append(errs, err)
	}
	if err := invalid(errs...); err != nil {
		return err
	}
	if _, err := projection.LoadOperation(r.Context(), s.cfg.DB, id); err != nil {
		return err
	}
	page, err := projection.Refusals(r.Context(), s.cfg.DB, id, after, limit+1)
	if err != nil {
		return err
	}
	out := RefusalList{Items: make([]OperationRefusal, 0, min(len(page), limit))}
	for i, ra := range page {
		if i == limit {
			c := page[i-1].String()
			out.NextCursor = &c
			break
		}
		out.Items = append(out.Items, OperationRefusal{MessageID: ra.MessageID, Reason: ra.Reason})
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

// operationOf is the resource of an operation; a running one's rate and
// time left are measured over its latest batches.
func (s *Server) operationOf(ctx context.Context, o *projection.Operation) (Operation, error) {
	by := journal.OperatorName(o.CreatedBy)
	out := Operation{ID: o.ID, Action: o.Action, Filter: o.Filter, Reason: optional(o.Reason), State: o.State,
		Matched: o.Matched, Done: o.Done, Refused: o.Refused, CreatedBy: by, StartedAt: o.CreatedAt,
		UpdatedAt: o.UpdatedAt, FinishedAt: optionalTime(o.FinishedAt), Error: optional(o.Error)}
	if o.State != lifecycle.OperationRunning {
		return out, nil
	}
	rate, err := projection.RecentRate(ctx, s.cfg.DB, o)
	if err != nil || rate <= 0 {
		return out, err
	}
	rounded := math.Round(rate*10) / 10
	eta := int64(math.Ceil(float64(o.Matched-o.Next()) / rate))
	out.Rate, out.EtaSeconds = &rounded, &eta
	return out, nil
}
