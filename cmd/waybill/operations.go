package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strings"
	"time"

	"github.com/waybill/waybill/lifecycle"
)

// The bulk operations' commands: create (with a progress bar until the
// operation ends), list, show and cancel, through the REST API.

// operation is the operation resource, as far as the commands show it.
type operation struct {
	ID     string `json:"id"`
	Action string `json:"action"`
	Filter struct {
		Status        []string `json:"status"`
		Target        string   `json:"target"`
		Source        string   `json:"source"`
		CreatedAfter  string   `json:"created_after"`
		CreatedBefore string   `json:"created_before"`
	} `json:"filter"`
	Reason     *string  `json:"reason"`
	State      string   `json:"state"`
	Matched    int      `json:"matched"`
	Done       int      `json:"done"`
	Refused    int      `json:"refused"`
	CreatedBy  string   `json:"created_by"`
	StartedAt  string   `json:"started_at"`
	FinishedAt *string  `json:"finished_at"`
	Error      *string  `json:"error"`
	Rate       *float64 `json:"rate"`
	EtaSeconds *int64   `json:"eta_seconds"`
}

type operationPage struct {
	Items      []operation `json:"items"`
	NextCursor *string     `json:"next_cursor"`
}

type refusalPage struct {
	Items []struct {
		MessageID string `json:"message_id"`
		Reason    string `json:"reason"`
	} `json:"items"`
	NextCursor *string `json:"next_cursor"`
}

// progressInterval is how often create asks how far the operation has
// come; the tests shorten it.
var progressInterval = 500 * time.Millisecond

// shownRefusals is how many refusals show prints.
const shownRefusals = 20

// operationsUsage is what `waybill operations` alone, or with -h, prints.
const operationsUsage = `usage: waybill operations create --action A [--status S ...] [--target T] [--source S] [--created-after T] [--created-before T] [--reason R] [--dry-run]
       waybill operations list [--limit N] [--cursor C]
       waybill operations show ID
       waybill operations cancel ID [--reason R]

A bulk operation acts on every message a filter matches, in paced batches,
on the server (docs/operations.md, "Bulk operations"). "waybill operations
SUB -h" lists a subcommand's flags.
`

// runOperations runs `waybill operations create|list|show|cancel`.
func runOperations(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	sub := ""
	if len(args) > 0 && !strings.HasPrefix(args[0], "-") {
		sub, args = args[0], args[1:]
	}
	switch {
	case sub == "help", sub == "" && len(args) > 0 && (args[0] == "-h" || args[0] == "-help" || args[0] == "--help"):
		fmt.Fprint(stderr, operationsUsage)
		return 0
	case sub == "":
		fmt.Fprint(stderr, operationsUsage)
		return 2
	}
	name := "waybill operations " + sub
	fs := newFlagSet(name, stderr)
	cfg := clientFlags(fs)
	var (
		action, target, source, after, before, reason, cursor string
		statuses                                              stringList
		dryRun                                                bool
		limit                                                 int
	)
	switch sub {
	case "create":
		fs.usage = "waybill operations create --action A [--status S ...] [--target T] [--source S] [--created-after T] [--created-before T] [--reason R] [--dry-run]"
		fs.StringVar(&action, "action", "", "what to do to each message: "+strings.Join(lifecycle.Strings(lifecycle.OperationActions), ", "))
		fs.Var(&statuses, "status", "only messages of this status; give it again for more: "+strings.Join(lifecycle.Strings(lifecycle.MessageStatuses), ", "))
		fs.StringVar(&target, "target", "", "only messages with a delivery to this target (redeliver and skip act on those deliveries only)")
		fs.StringVar(&source, "source", "", "only messages of this source")
		fs.StringVar(&after, "created-after", "", "only messages created after this RFC 3339 time")
		fs.StringVar(&before, "created-before", "", "only messages created before this RFC 3339 time")
		fs.StringVar(&reason, "reason", "", "why, kept in the journal with the operation and its actions")
		fs.BoolVar(&dryRun, "dry-run", false, "say how many messages the operation would act on and refuse, by reason, and change nothing")
	case "list":
		fs.usage = "waybill operations list [--limit N] [--cursor C]"
		fs.IntVar(&limit, "limit", 0, "at most this many operations (the server's default when 0)")
		fs.StringVar(&cursor, "cursor", "", "the page after this cursor, as a previous page named it")
	case "show":
		fs.usage = "waybill operations show ID"
	case "cancel":
		fs.usage = "waybill operations cancel ID [--reason R]"
		fs.StringVar(&reason, "reason", "", "why, kept in the journal")
	default:
		fmt.Fprintf(stderr, "waybill operations: %q is not a subcommand: use create, list, show or cancel\n", sub)
		return 2
	}
	pos, err := fs.parse(args)
	if errors.Is(err, errHelp) {
		return 0
	}
	if err != nil {
		return 2
	}
	misuse := func(format string, a ...any) int {
		fmt.Fprintf(stderr, "%s: %s\nusage: %s\n", name, fmt.Sprintf(format, a...), fs.usage)
		return 2
	}
	var act func(context.Context, *client) (int, error)
	switch sub {
	case "create":
		if len(pos) != 0 {
			return misuse("unexpected arguments %q", pos)
		}
		if action == "" {
			return misuse("--action is required: %s", strings.Join(lifecycle.Strings(lifecycle.OperationActions), ", "))
		}
		filter := map[string]any{}
		if len(statuses) > 0 {
			filter["status"] = statuses
		}
		for k, v := range map[string]string{"target": target, "source": source, "created_after": after, "created_before": before} {
			if v != "" {
				filter[k] = v
			}
		}
		body := map[string]any{"action": action, "filter": filter, "reason": reason, "dry_run": dryRun}
		act = func(ctx context.Context, c *client) (int, error) {
			if dryRun {
				return 0, dryRunOperation(ctx, c, stdout, body)
			}
			var o operation
			if err := c.do(ctx, http.MethodPost, "operations", nil, body, &o); err != nil {
				return 1, err
			}
			fmt.Fprintf(stdout, "operation %s started: %s of %s\n", o.ID, o.Action, countMessages(o.Matched))
			return watchOperation(ctx, c, stdout, o.ID, isTerminal(stdout))
		}
	case "list":
		if len(pos) != 0 {
			return misuse("unexpected arguments %q", pos)
		}
		if limit < 0 {
			return misuse("--limit: must be positive")
		}
		act = func(ctx context.Context, c *client) (int, error) {
			return 0, listOperations(ctx, c, stdout, limit, cursor)
		}
	case "show", "cancel":
		if len(pos) != 1 {
			return misuse("%s takes one operation id", sub)
		}
		if !isUUID(pos[0]) {
			return misuse("%q is not an operation id", pos[0])
		}
		act = func(ctx context.Context, c *client) (int, error) {
			var o operation
			if sub == "cancel" {
				if err := c.do(ctx, http.MethodPost, "operations/"+pos[0]+"/cancel", nil, map[string]string{"reason": reason}, &o); err != nil {
					return 1, err
				}
				fmt.Fprintf(stdout, "operation %s cancelled: %d of %s taken; it takes no more\n\n", o.ID, o.Done+o.Refused, countMessages(o.Matched))
			} else if err := c.do(ctx, http.MethodGet, "operations/"+pos[0], nil, nil, &o); err != nil {
				return 1, err
			}
			return 0, showOperation(ctx, c, stdout, &o)
		}
	}
	c, err := cfg.newClient(stderr)
	if err != nil {
		fmt.Fprintf(stderr, "%s: %v\n", name, err)
		return 2
	}
	code, err := act(ctx, c)
	if err != nil {
		fmt.Fprintf(stderr, "%s: %v\n", name, err)
		var ae *apiError
		if errors.As(err, &ae) && ae.Status == http.StatusUnauthorized {
			fmt.Fprintf(stderr, "the server refused the token from %s\n", c.tokenFrom)
		}
		return 1
	}
	return code
}

// dryRunOperation prints what the operation would do if it ran now: how
// many messages it would act on and refuse, the refusals by code, and the
// first messages.
func dryRunOperation(ctx context.Context, c *client, w io.Writer, body map[string]any) error {
	var dry struct {
		Matched  int      `json:"matched"`
		Sample   []string `json:"sample"`
		Decided  int      `json:"decided"`
		Done     int      `json:"done"`
		Refused  int      `json:"refused"`
		Refusals []struct {
			Code    string `json:"code"`
			Count   int    `json:"count"`
			Example string `json:"example"`
		} `json:"refusals"`
	}
	if err := c.do(ctx, http.MethodPost, "operations", nil, body, &dry); err != nil {
		return err
	}
	fmt.Fprintf(w, "dry run: %s matches %s: it would act on %s and refuse %d; nothing was changed\n",
		body["action"], countMessages(dry.Matched), countMessages(dry.Done), dry.Refused)
	if dry.Decided < dry.Matched {
		fmt.Fprintf(w, "(of the first %s, all the dry run's time allowed; the rest were counted, not decided)\n",
			countMessages(dry.Decided))
	}
	if len(dry.Refusals) > 0 {
		fmt.Fprintln(w, "refused, by reason:")
		for _, r := range dry.Refusals {
			fmt.Fprintf(w, "  %d  %s  e.g. %s\n", r.Count, r.Code, shorten(oneLine(r.Example), 160))
		}
	}
	if len(dry.Sample) > 0 {
		fmt.Fprintf(w, "the first %d, in the order it would take them:\n", len(dry.Sample))
		for _, id := range dry.Sample {
			fmt.Fprintf(w, "  %s\n", id)
		}
	}
	return nil
}

// watchOperation shows the operation's progress until it ends: a bar
// redrawn in place on a terminal, else a line each time it moves. It
// returns 0 when the operation ended done, 1 when it was cancelled or
// failed, or when the watch was interrupted (the operation goes on).
func watchOperation(ctx context.Context, c *client, w io.Writer, id string, tty bool) (int, error) {
	t := time.NewTicker(progressInterval)
	defer t.Stop()
	last := ""
	for {
		var o operation
		if err := c.do(ctx, http.MethodGet, "operations/"+id, nil, nil, &o); err != nil {
			if ctx.Err() != nil {
				return stopWatching(w, id, tty), nil
			}
			return 1, err
		}
		line := progressLine(&o)
		switch {
		case tty:
			fmt.Fprintf(w, "\r%s %s\x1b[K", progressBar(&o, 30), line)
		case line != last:
			fmt.Fprintln(w, line)
		}
		last = line
		if o.State != string(lifecycle.OperationRunning) {
			if tty {
				fmt.Fprintln(w)
			}
			return endOfOperation(w, &o), nil
		}
		select {
		case <-ctx.Done():
			return stopWatching(w, id, tty), nil
		case <-t.C:
		}
	}
}

func stopWatching(w io.Writer, id string, tty bool) int {
	if tty {
		fmt.Fprintln(w)
	}
	fmt.Fprintf(w, "stopped watching; the operation goes on in the server:\n  waybill operations show %s\n  waybill operations cancel %s\n", id, id)
	return 1
}

// endOfOperation says how the operation ended; 0 for done.
func endOfOperation(w io.Writer, o *operation) int {
	fmt.Fprintf(w, "operation %s %s: %d done, %d refused, of %d\n", o.ID, o.State, o.Done, o.Refused, o.Matched)
	if o.Error != nil {
		fmt.Fprintf(w, "error: %s\n", oneLine(*o.Error))
	}
	if o.Refused > 0 {
		fmt.Fprintf(w, "the refusals and why: waybill operations show %s\n", o.ID)
	}
	if o.State == string(lifecycle.OperationDone) {
		return 0
	}
	return 1
}

// progressLine is where the operation stands: taken of matched, the rate
// and the time left.
func progressLine(o *operation) string {
	taken := o.Done + o.Refused
	pct := 100
	if o.Matched > 0 {
		pct = taken * 100 / o.Matched
	}
	rate, eta := "-", "-"
	if o.Rate != nil {
		rate = fmt.Sprintf("%.1f", *o.Rate)
	}
	if o.EtaSeconds != nil {
		eta = (time.Duration(*o.EtaSeconds) * time.Second).String()
	}
	return fmt.Sprintf("%d/%d (%d%%) %s: %d done, %d refused, %s messages/s, ETA %s", taken, o.Matched, pct, o.State,
		o.Done, o.Refused, rate, eta)
}

// progressBar draws taken of matched in width cells.
func progressBar(o *operation, width int) string {
	full := width
	if o.Matched > 0 {
		full = (o.Done + o.Refused) * width / o.Matched
	}
	return "[" + strings.Repeat("#", full) + strings.Repeat("-", width-full) + "]"
}

// isTerminal reports whether w is a terminal, where the bar is redrawn in
// place.
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	info, err := f.Stat()
	return err == nil && info.Mode()&os.ModeCharDevice != 0
}

func listOperations(ctx context.Context, c *client, w io.Writer, limit int, cursor string) error {
	q := url.Values{}
	again := pageFlags(q, nil, limit, cursor)
	var page operationPage
	if err := c.do(ctx, http.MethodGet, "operations", q, nil, &page); err != nil {
		return err
	}
	if len(page.Items) == 0 {
		fmt.Fprintln(w, "no operations")
	} else {
		t := newTable(w, "ID", "STARTED", "ACTION", "STATE", "TAKEN", "DONE", "REFUSED", "BY")
		for _, o := range page.Items {
			t.row(o.ID, timeCell(o.StartedAt), o.Action, o.State, fmt.Sprintf("%d/%d", o.Done+o.Refused, o.Matched),
				fmt.Sprint(o.Done), fmt.Sprint(o.Refused), o.CreatedBy)
		}
		t.flush()
	}
	printNextPage(w, "waybill operations list", again, page.NextCursor)
	return nil
}

// showOperation prints the operation and its first refusals.
func showOperation(ctx context.Context, c *client, w io.Writer, o *operation) error {
	var refusals refusalPage
	if o.Refused > 0 {
		q := url.Values{"limit": {fmt.Sprint(shownRefusals)}}
		if err := c.do(ctx, http.MethodGet, "operations/"+o.ID+"/refusals", q, nil, &refusals); err != nil {
			return err
		}
	}
	t := newTable(w)
	t.row("operation", o.ID)
	t.row("action", o.Action)
	var filter []string
	if len(o.Filter.Status) > 0 {
		filter = append(filter, "status "+strings.Join(o.Filter.Status, ", "))
	}
	for _, f := range [][2]string{{"target", o.Filter.Target}, {"source", o.Filter.Source},
		{"created after", timeCell(o.Filter.CreatedAfter)}, {"created before", timeCell(o.Filter.CreatedBefore)}} {
		if f[1] != "" {
			filter = append(filter, f[0]+" "+f[1])
		}
	}
	t.row("filter", strings.Join(filter, "; "))
	t.row("reason", str(o.Reason))
	t.row("state", o.State)
	t.row("progress", progressLine(o))
	if o.Error != nil {
		t.row("error", oneLine(*o.Error))
	}
	t.row("by", o.CreatedBy)
	t.row("started", timeCell(o.StartedAt))
	t.row("finished", timeCell(str(o.FinishedAt)))
	t.flush()
	if o.Refused == 0 {
		return nil
	}
	fmt.Fprintf(w, "\nrefusals\n")
	rt := newTable(w, "MESSAGE", "REASON")
	for _, r := range refusals.Items {
		rt.row(r.MessageID, shorten(r.Reason, 120))
	}
	rt.flush()
	if refusals.NextCursor != nil {
		fmt.Fprintf(w, "\n%d refusals in all; GET /api/v1/operations/%s/refusals pages them\n", o.Refused, o.ID)
	}
	return nil
}

// countMessages is n messages in words.
func countMessages(n int) string { return lifecycle.Count(n, "message", "messages") }
