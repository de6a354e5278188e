package main

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"net/http"
	"net/netip"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/waybill/waybill/auth"

	"github.com/waybill/waybill/internal/plainjson"
	"github.com/waybill/waybill/lifecycle"
)

// The operator commands that talk to a running server's REST API.

// client calls the API of one server with one token.
type client struct {
	base  *url.URL // the server, without /api/v1
	token string
	// tokenFrom says where the token came from, for the hint on a refusal.
	tokenFrom string
	http      *http.Client
}

// maxResponse bounds what the client reads of an answer.
const maxResponse = 32 << 20

// apiError is an answer outside 2xx: the API's error envelope when the
// server sent one, otherwise the status and the start of the body.
type apiError struct {
	Status  int
	Code    string
	Message string
	Details map[string]any
}

func (e *apiError) Error() string {
	var b strings.Builder
	if e.Code != "" {
		fmt.Fprintf(&b, "%s: %s (HTTP %d)", e.Code, e.Message, e.Status)
	} else {
		fmt.Fprintf(&b, "HTTP %d %s", e.Status, http.StatusText(e.Status))
		if e.Message != "" {
			fmt.Fprintf(&b, ": %s", e.Message)
		}
	}
	for _, k := range slices.Sorted(maps.Keys(e.Details)) {
		v, ok := e.Details[k].(string)
		if !ok {
			j, _ := plainjson.Marshal(e.Details[k])
			v = string(j)
		}
		fmt.Fprintf(&b, "\n  %s: %s", k, v)
	}
	return b.String()
}

// do sends a request to path under /api/v1 and decodes a 2xx answer into
// out. A POST carries no body but says it is JSON, as the API requires.
func (c *client) do(ctx context.Context, method, path string, query url.Values, body, out any) error {
	return c.doIfMatch(ctx, method, path, query, 0, body, out)
}

// doIfMatch is do with If-Match naming the message version an action is
// for; none when version is 0.
func (c *client) doIfMatch(ctx context.Context, method, path string, query url.Values, version int, body, out any) error {
	u := c.base.JoinPath("/api/v1", path)
	u.RawQuery = query.Encode()
	var reqBody io.Reader = http.NoBody
	if body != nil {
		data, err := plainjson.Marshal(body)
		if err != nil {
			return err
		}
		reqBody = bytes.NewReader(data)
	}
	req, err := http.NewRequestWithContext(ctx, method, u.String(), reqBody)
	if err != nil {
		return err
	}
	req.Header.Set("Authorization", "Bearer "+c.token)
	req.Header.Set("Accept", "application/json")
	req.Header.Set("User-Agent", "waybill-cli")
	if method == http.MethodPost {
		req.Header.Set("Content-Type", "application/json")
	}
	if version != 0 {
		req.Header.Set("If-Match", fmt.Sprintf("%q", fmt.Sprint(version)))
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return fmt.Errorf("cannot reach the server at %s (is `waybill serve` running? --server, env WAYBILL_SERVER, or the --data-dir it runs on): %w", c.base, err)
	}
	defer resp.Body.Close()
	answer, err := io.ReadAll(io.LimitReader(resp.Body, maxResponse))
	if err != nil {
		return fmt.Errorf("%s %s: read answer: %w", method, u.Path, err)
	}
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		return decodeError(resp.StatusCode, answer)
	}
	if err := json.Unmarshal(answer, out); err != nil {
		return fmt.Errorf("%s %s: the answer is not the API's JSON: %w", method, u.Path, err)
	}
	return nil
}

func decodeError(status int, body []byte) *apiError {
	var env struct {
		Error *struct {
			Code    string         `json:"code"`
			Message string         `json:"message"`
			Details map[string]any `json:"details"`
		} `json:"error"`
	}
	if json.Unmarshal(body, &env) == nil && env.Error != nil && env.Error.Code != "" {
		return &apiError{Status: status, Code: env.Error.Code, Message: env.Error.Message, Details: env.Error.Details}
	}
	// Not the API's envelope: a proxy, or not a Waybill server at all.
	text := strings.TrimSpace(string(body))
	if len(text) > 200 {
		text = text[:200] + "…"
	}
	return &apiError{Status: status, Message: oneLine(text)}
}

// The resources, as far as the commands show them.

type message struct {
	ID            string     `json:"id"`
	Version       int        `json:"version"`
	Generation    int        `json:"generation"`
	Source        string     `json:"source"`
	From          string     `json:"from"`
	To            string     `json:"to"`
	Stage         string     `json:"stage"`
	Status        string     `json:"status"`
	Error         string     `json:"error"`
	CreatedAt     string     `json:"created_at"`
	UpdatedAt     string     `json:"updated_at"`
	PayloadSize   int64      `json:"payload_size"`
	PayloadSHA256 string     `json:"payload_sha256"`
	OrderingKey   *string    `json:"ordering_key"`
	DuplicateKey  *string    `json:"duplicate_key"`
	DuplicateOf   *string    `json:"possible_duplicate_of"`
	Type          *string    `json:"type"`
	DeliverAt     *string    `json:"deliver_at"`
	Deliveries    []delivery `json:"deliveries"`
}

type delivery struct {
	ID            string  `json:"id"`
	Generation    int     `json:"generation"`
	Target        string  `json:"target"`
	State         string  `json:"state"`
	Attempts      int     `json:"attempts"`
	NextAttemptAt *string `json:"next_attempt_at"`
	LastError     string  `json:"last_error"`
	CreatedAt     string  `json:"created_at"`
	UpdatedAt     string  `json:"updated_at"`
	FinishedAt    *string `json:"finished_at"`
	LaneSeq       *int64  `json:"lane_seq"`
}

type lanePage struct {
	Items []struct {
		OrderingKey string `json:"ordering_key"`
		Head        *struct {
			MessageID  string `json:"message_id"`
			DeliveryID string `json:"delivery_id"`
			State      string `json:"state"`
			Since      string `json:"since"`
		} `json:"head"`
		Waiting      int64   `json:"waiting"`
		WaitingSince *string `json:"waiting_since"`
	} `json:"items"`
	NextCursor   *string `json:"next_cursor"`
	OrderingMode string  `json:"ordering_mode"`
}

type messagePage struct {
	Items      []message `json:"items"`
	NextCursor *string   `json:"next_cursor"`
}

type historyEvent struct {
	Position   int64   `json:"position"`
	At         string  `json:"at"`
	Kind       string  `json:"kind"`
	Actor      string  `json:"actor"`
	DeliveryID *string `json:"delivery_id"`
	Target     *string `json:"target"`
	OldState   *string `json:"old_state"`
	NewState   *string `json:"new_state"`
	Text       string  `json:"text"`
}

type history struct {
	Items []historyEvent `json:"items"`
}

// clientConfig is what every client command takes.
type clientConfig struct {
	server  string
	token   string
	dataDir string
	// flags tell whether the token came on the command line.
	flags *flag.FlagSet
}

// defaultServer is the server of the client commands when neither
// --server, WAYBILL_SERVER nor the data directory names one.
const defaultServer = "http://127.0.0.1:8080"

func clientFlags(fs *flagSet) *clientConfig {
	c := &clientConfig{flags: fs.FlagSet}
	fs.StringVar(&c.server, "server", env("WAYBILL_SERVER", ""),
		"URL of the Waybill server (env WAYBILL_SERVER); without one, the "+serverURLFile+
			" the server running on --data-dir wrote, else "+defaultServer)
	stringFromEnv(fs.FlagSet, &c.token, "token", "WAYBILL_TOKEN",
		"API `token`; prefer the variable WAYBILL_TOKEN, since the command line shows in ps to every user of the machine; without either, the admin token file of --data-dir, for the server running on it")
	fs.StringVar(&c.dataDir, "data-dir", env("WAYBILL_DATA_DIR", "./var"),
		"the server's data directory, for its "+serverURLFile+" and "+auth.AdminTokenFile+" (env WAYBILL_DATA_DIR)")
	return c
}

// newClient finds the server and the token, and checks the server's URL.
// The server is the flag's or the variable's, otherwise the one whose
// address the data directory holds, otherwise defaultServer; the token is
// the flag's or the variable's, otherwise the admin token file the server
// wrote, which goes only to that server: to the address its data
// directory holds. A token on the command line is taken with a warning on
// stderr (any user of the machine reads it in ps), and so is one sent in
// clear over http:// to a host not of this machine.
func (c *clientConfig) newClient(stderr io.Writer) (*client, error) {
	onCommandLine := false
	c.flags.Visit(func(f *flag.Flag) { onCommandLine = onCommandLine || f.Name == "token" })
	if onCommandLine {
		fmt.Fprintf(stderr, "warning: --token shows the token to every user of this machine (ps, /proc); set WAYBILL_TOKEN instead, or let the command read %s of --data-dir\n", auth.AdminTokenFile)
	}
	running, runningFrom, err := c.dataDirServer()
	if err != nil {
		return nil, err
	}
	server, from := c.server, "--server"
	if server == "" {
		server, from = cmp.Or(running, defaultServer), cmp.Or(runningFrom, "the default server")
	}
	u, err := url.Parse(server)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("%s: %q is not an http:// or https:// URL", from, server)
	}
	cl := &client{base: u, token: strings.TrimSpace(c.token), tokenFrom: "--token or WAYBILL_TOKEN",
		http: &http.Client{Timeout: 30 * time.Second}}
	if cl.token == "" {
		path := filepath.Join(c.dataDir, auth.AdminTokenFile)
		switch {
		case running == "" && c.server == "":
			return nil, fmt.Errorf("no server runs on --data-dir %s (there is no %s): start one with `waybill serve`, or give another's --server and --token (or WAYBILL_TOKEN); the admin token of a data directory goes only to the server running on it",
				c.dataDir, filepath.Join(c.dataDir, serverURLFile))
		case running == "":
			return nil, fmt.Errorf("no token: pass --token or set WAYBILL_TOKEN (`waybill token create` makes one); the admin token of --data-dir %s goes only to the server running on it, and none is (there is no %s)",
				c.dataDir, filepath.Join(c.dataDir, serverURLFile))
		case server != running:
			return nil, fmt.Errorf("no token for %s: pass --token or set WAYBILL_TOKEN (`waybill token create` makes one); the admin token of --data-dir %s goes only to the server running on it, %s",
				server, c.dataDir, running)
		}
		b, err := os.ReadFile(path)
		if errors.Is(err, fs.ErrNotExist) {
			return nil, fmt.Errorf("no token: pass --token or set WAYBILL_TOKEN (`waybill token create` makes one), or point --data-dir at the server's data directory, which holds %s (there is no %s)", auth.AdminTokenFile, path)
		}
		if err != nil {
			return nil, fmt.Errorf("read the token file: %w", err)
		}
		cl.token, cl.tokenFrom = strings.TrimSpace(string(b)), path
		if cl.token == "" {
			return nil, fmt.Errorf("the token file %s is empty", path)
		}
	}
	if u.Scheme == "http" && !loopbackHost(u.Hostname()) {
		fmt.Fprintf(stderr, "warning: the token goes to %s in clear text, over http://; use https://\n", u.Host)
	}
	return cl, nil
}

// loopbackHost reports whether host, as url.URL.Hostname gives it, names
// this machine: localhost or a loopback address.
func loopbackHost(host string) bool {
	if strings.EqualFold(host, "localhost") {
		return true
	}
	a, err := netip.ParseAddr(host)
	return err == nil && a.IsLoopback()
}

// dataDirServer returns the URL of the server running on the data
// directory, from the file it keeps there, and the file's path; "" and ""
// without the file.
func (c *clientConfig) dataDirServer() (server, from string, err error) {
	path := filepath.Join(c.dataDir, serverURLFile)
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return "", "", nil
	}
	if err != nil {
		return "", "", fmt.Errorf("read the server's URL: %w", err)
	}
	return strings.TrimSpace(string(b)), path, nil
}

// runClient runs one of the commands that talk to a server: messages,
// lanes and the actions on a message.
func runClient(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	cmd := args[0]
	fs := newFlagSet("waybill "+cmd, stderr)
	cfg := clientFlags(fs)
	var cursor, reason string
	filters := make([]string, len(messageFilters))
	var limit, version int
	var blocked, duplicates bool
	var targets stringList
	switch cmd {
	case "messages":
		fs.usage = "waybill messages [--status S] [--source S] [--target T] [--ordering-key K] [--type T] [--from F] [--to T] [--idempotency-key K] [--possible-duplicates] [--limit N] [--cursor C]\n       waybill messages show MESSAGE_ID"
		for i, f := range messageFilters {
			fs.StringVar(&filters[i], f.flag, "", f.usage)
		}
		fs.BoolVar(&duplicates, "possible-duplicates", false, "only messages that name a possible duplicate")
		fs.IntVar(&limit, "limit", 0, "at most this many messages (the server's default when 0)")
		fs.StringVar(&cursor, "cursor", "", "the page after this cursor, as a previous page named it")
	case "redeliver":
		fs.usage = "waybill redeliver MESSAGE_ID DELIVERY_ID [--if-version V]"
	case "skip":
		fs.usage = "waybill skip MESSAGE_ID DELIVERY_ID [--reason R] [--if-version V]"
		fs.StringVar(&reason, "reason", "", "why the delivery is skipped, kept in the journal")
	case "resend":
		fs.usage = "waybill resend MESSAGE_ID [--target T]... [--reason R] [--if-version V]"
		fs.Var(&targets, "target", "send to this target of the current generation only (repeatable; all of them when none)")
		fs.StringVar(&reason, "reason", "", "why the message is sent again, kept in the journal")
	case "replay":
		fs.usage = "waybill replay MESSAGE_ID [--reason R] [--if-version V]"
		fs.StringVar(&reason, "reason", "", "why the message is sent again, kept in the journal")
	case "lanes":
		fs.usage = "waybill lanes TARGET [--blocked] [--limit N] [--cursor C]"
		fs.BoolVar(&blocked, "blocked", false, "only lanes with deliveries waiting")
		fs.IntVar(&limit, "limit", 0, "at most this many lanes (the server's default when 0)")
		fs.StringVar(&cursor, "cursor", "", "the page after this cursor, as a previous page named it")
	case "redispatch":
		fs.usage = "waybill redispatch MESSAGE_ID [--if-version V]"
	case "deliver-now":
		fs.usage = "waybill deliver-now MESSAGE_ID [--if-version V]"
	}
	if slices.Contains(actionCommands, cmd) {
		fs.IntVar(&version, "if-version", 0,
			"act only on the message at this version, as waybill messages show printed it; refused if it moved since")
	}
	pos, err := fs.parse(args[1:])
	if errors.Is(err, errHelp) {
		return 0
	}
	if err != nil {
		return 2
	}
	misuse := func(format string, a ...any) int {
		fmt.Fprintf(stderr, "waybill %s: %s\nusage: %s\n", cmd, fmt.Sprintf(format, a...), fs.usage)
		return 2
	}

	// The arguments are checked before anything is sent.
	var act func(context.Context, *client) error
	switch {
	case version < 0:
		return misuse("--if-version: must be positive")
	case cmd == "messages" && len(pos) == 0:
		if limit < 0 {
			return misuse("--limit: must be positive")
		}
		act = func(ctx context.Context, c *client) error {
			return listMessages(ctx, c, stdout, filters, duplicates, limit, cursor)
		}
	case cmd == "messages" && pos[0] == "show":
		if len(pos) < 2 {
			return misuse("missing MESSAGE_ID: show takes one message id")
		}
		if len(pos) > 2 {
			return misuse("unexpected arguments %q: show takes one message id", pos[2:])
		}
		if !isUUID(pos[1]) {
			return misuse("%q is not a message id", pos[1])
		}
		act = func(ctx context.Context, c *client) error { return showMessage(ctx, c, stdout, pos[1]) }
	case slices.Contains(actionCommands, cmd):
		path, body, done, problem := messageAction(cmd, pos, reason, targets)
		if problem != "" {
			return misuse("%s", problem)
		}
		act = func(ctx context.Context, c *client) error {
			var m message
			if err := c.doIfMatch(ctx, http.MethodPost, path, nil, version, body, &m); err != nil {
				return staleHint(err, pos[0])
			}
			fmt.Fprintf(stdout, "%s\n\n", done)
			printMessage(stdout, &m)
			return nil
		}
	case cmd == "lanes" && len(pos) == 0:
		return misuse("missing TARGET: the name of a target whose ordering.mode is fifo")
	case cmd == "lanes" && len(pos) == 1:
		if limit < 0 {
			return misuse("--limit: must be positive")
		}
		act = func(ctx context.Context, c *client) error {
			return listLanes(ctx, c, stdout, pos[0], blocked, limit, cursor)
		}
	default:
		return misuse("unexpected arguments %q", pos)
	}
	c, err := cfg.newClient(stderr)
	if err != nil {
		fmt.Fprintf(stderr, "waybill %s: %v\n", cmd, err)
		return 2
	}
	if err := act(ctx, c); err != nil {
		fmt.Fprintf(stderr, "waybill %s: %v\n", cmd, err)
		var ae *apiError
		if errors.As(err, &ae) && ae.Status == http.StatusUnauthorized {
			fmt.Fprintf(stderr, "the server refused the token from %s\n", c.tokenFrom)
		}
		return 1
	}
	return 0
}

// actionCommands are the operator's actions on one message.
var actionCommands = []string{"redeliver", "skip", "redispatch", "deliver-now", "resend", "replay"}

// messageAction is the path and the body of an action's request and what
// to say once it is done, or what is wrong with its arguments.
func messageAction(cmd string, pos []string, reason string, targets []string) (path string, body any, done, problem string) {
	args := []string{"MESSAGE_ID"}
	if cmd == "redeliver" || cmd == "skip" {
		args = append(args, "DELIVERY_ID")
	}
	want := len(args)
	switch {
	case len(pos) < want:
		return "", nil, "", "missing " + strings.Join(args[len(pos):], " ")
	case len(pos) > want:
		return "", nil, "", fmt.Sprintf("too many arguments: %q", pos[want:])
	case !isUUID(pos[0]):
		return "", nil, "", fmt.Sprintf("%q is not a message id", pos[0])
	case want == 2 && !isUUID(pos[1]):
		return "", nil, "", fmt.Sprintf("%q is not a delivery id", pos[1])
	}
	path = "messages/" + pos[0] + "/"
	switch cmd {
	case "redeliver", "skip":
		done = fmt.Sprintf("delivery %s %s", pos[1], map[string]string{"redeliver": "redelivered", "skip": "skipped"}[cmd])
		path += "deliveries/" + pos[1] + "/" + cmd
	default:
		done = fmt.Sprintf("message %s %s", pos[0], map[string]string{"redispatch": "redispatched", "deliver-now": "delivered now",
			"resend": "resent", "replay": "replayed"}[cmd])
		path += cmd
	}
	switch cmd {
	case "skip", "replay":
		body = map[string]string{"reason": reason}
	case "resend":
		body = map[string]any{"targets": targets, "reason": reason}
	}
	return path, body, done, ""
}

// staleHint adds to a 412 what the operator does next.
func staleHint(err error, id string) error {
	var ae *apiError
	if errors.As(err, &ae) && ae.Status == http.StatusPreconditionFailed {
		return fmt.Errorf("%w\nthe message changed since that version: look at it again (waybill messages show %s) before acting", err, id)
	}
	return err
}

// stringList is a flag that may be given several times.
type stringList []string

func (l *stringList) String() string { return strings.Join(*l, ",") }

func (l *stringList) Set(v string) error {
	*l = append(*l, v)
	return nil
}

// messageFilters are the exact filters of waybill messages: each flag and
// the query parameter it sets.
var messageFilters = []struct{ flag, param, usage string }{
	{"status", "status", "only messages of this status: " + strings.Join(lifecycle.Strings(lifecycle.MessageStatuses), ", ")},
	{"source", "source", "only messages of this source"},
	{"target", "target", "only messages with a delivery to this target"},
	{"ordering-key", "ordering_key", "only messages with exactly this ordering key"},
	{"type", "type", "only messages of exactly this type"},
	{"from", "from", "only messages from exactly this party"},
	{"to", "to", "only messages to exactly this party"},
	{"idempotency-key", "idempotency_key", "only messages with exactly this idempotency key"},
}

// listMessages prints a page of messages; filters holds the value of each
// of messageFilters, "" when not given.
func listMessages(ctx context.Context, c *client, w io.Writer, filters []string, duplicates bool, limit int, cursor string) error {
	q := url.Values{}
	var again []string
	for i, f := range messageFilters {
		if v := filters[i]; v != "" {
			q.Set(f.param, v)
			again = append(again, "--"+f.flag, v)
		}
	}
	if duplicates {
		q.Set("possible_duplicate", "true")
		again = append(again, "--possible-duplicates")
	}
	again = pageFlags(q, again, limit, cursor)
	var page messagePage
	if err := c.do(ctx, http.MethodGet, "messages", q, nil, &page); err != nil {
		return err
	}
	if len(page.Items) == 0 {
		fmt.Fprintln(w, "no messages")
	} else {
		t := newTable(w, "ID", "CREATED", "STATUS", "STAGE", "SOURCE", "FROM", "TO", "ERROR")
		for _, m := range page.Items {
			t.row(m.ID, timeCell(m.CreatedAt), m.Status, m.Stage, m.Source, m.From, m.To, shorten(m.Error, 60))
		}
		t.flush()
	}
	printNextPage(w, "waybill messages", again, page.NextCursor)
	return nil
}

// pageFlags adds a list's --limit and --cursor to its query, and --limit to
// again, the flags that ask the list for its next page.
func pageFlags(q url.Values, again []string, limit int, cursor string) []string {
	if limit > 0 {
		q.Set("limit", fmt.Sprint(limit))
		again = append(again, "--limit", fmt.Sprint(limit))
	}
	if cursor != "" {
		q.Set("cursor", cursor)
	}
	return again
}

// printNextPage prints the command that reads the next page, when there
// is one.
func printNextPage(w io.Writer, command string, again []string, next *string) {
	if next != nil && *next != "" {
		fmt.Fprintf(w, "\nnext page: %s\n", strings.Join(append(append([]string{command}, again...), "--cursor", shellQuote(*next)), " "))
	}
}

func showMessage(ctx context.Context, c *client, w io.Writer, id string) error {
	var m message
	if err := c.do(ctx, http.MethodGet, "messages/"+id, nil, nil, &m); err != nil {
		return err
	}
	var h history
	if err := c.do(ctx, http.MethodGet, "messages/"+id+"/history", nil, nil, &h); err != nil {
		return err
	}
	printMessage(w, &m)
	fmt.Fprintf(w, "\nhistory\n")
	if len(h.Items) == 0 {
		fmt.Fprintln(w, "  no events")
		return nil
	}
	t := newTable(w, "POSITION", "AT", "KIND", "ACTOR", "TARGET", "STATE", "TEXT")
	for _, e := range h.Items {
		state := str(e.NewState)
		if e.OldState != nil && *e.OldState != "" {
			state = *e.OldState + " -> " + state
		}
		t.row(fmt.Sprint(e.Position), timeCell(e.At), e.Kind, e.Actor, str(e.Target), state, shorten(e.Text, 100))
	}
	t.flush()
	return nil
}

// listLanes prints a page of a target's lanes.
func listLanes(ctx context.Context, c *client, w io.Writer, target string, blocked bool, limit int, cursor string) error {
	q := url.Values{}
	var again []string
	if blocked {
		q.Set("blocked", "true")
		again = append(again, "--blocked")
	}
	again = pageFlags(q, again, limit, cursor)
	var page lanePage
	if err := c.do(ctx, http.MethodGet, "targets/"+url.PathEscape(target)+"/lanes", q, nil, &page); err != nil {
		return err
	}
	if len(page.Items) == 0 {
		if page.OrderingMode == "none" {
			fmt.Fprintf(w, "no lanes: target %s keeps no order (its ordering.mode is none; fifo keeps lanes)\n", target)
			return nil
		}
		fmt.Fprintln(w, "no lanes")
		return nil
	}
	t := newTable(w, "ORDERING KEY", "HEAD MESSAGE", "HEAD DELIVERY", "STATE", "HEAD SINCE", "WAITING", "WAITING SINCE")
	for _, l := range page.Items {
		msg, dl, state, since := "-", "-", "-", ""
		if h := l.Head; h != nil {
			msg, dl, state, since = h.MessageID, h.DeliveryID, h.State, h.Since
		}
		t.row(l.OrderingKey, msg, dl, state, timeCell(since), fmt.Sprint(l.Waiting), timeCell(str(l.WaitingSince)))
	}
	t.flush()
	printNextPage(w, "waybill lanes "+shellQuote(target), again, page.NextCursor)
	return nil
}

// printMessage shows a message's fields, then its deliveries.
func printMessage(w io.Writer, m *message) {
	t := newTable(w)
	t.row("message", m.ID)
	t.row("version", fmt.Sprint(m.Version))
	t.row("status", m.Status)
	t.row("stage", m.Stage)
	t.row("generation", fmt.Sprint(m.Generation))
	if m.Error != "" {
		t.row("error", oneLine(m.Error))
	}
	t.row("source", m.Source)
	t.row("from", m.From)
	t.row("to", m.To)
	if m.Type != nil {
		t.row("type", *m.Type)
	}
	t.row("payload", fmt.Sprintf("%s, sha256 %s", lifecycle.Count(m.PayloadSize, "byte", "bytes"), m.PayloadSHA256))
	if m.OrderingKey != nil {
		t.row("ordering key", *m.OrderingKey)
	}
	if m.DuplicateKey != nil {
		t.row("duplicate key", *m.DuplicateKey)
	}
	if m.DuplicateOf != nil {
		t.row("possible duplicate of", *m.DuplicateOf)
	}
	if m.DeliverAt != nil {
		t.row("deliver at", timeCell(*m.DeliverAt))
	}
	t.row("created", timeCell(m.CreatedAt))
	t.row("updated", timeCell(m.UpdatedAt))
	t.flush()
	fmt.Fprintf(w, "\ndeliveries\n")
	if len(m.Deliveries) == 0 {
		fmt.Fprintln(w, "  none")
		return
	}
	t = newTable(w, "ID", "GEN", "TARGET", "STATE", "ATTEMPTS", "NEXT ATTEMPT", "FINISHED", "LANE", "LAST ERROR")
	for _, d := range m.Deliveries {
		lane := "-"
		if d.LaneSeq != nil {
			lane = fmt.Sprint(*d.LaneSeq)
		}
		t.row(d.ID, fmt.Sprint(d.Generation), d.Target, d.State, fmt.Sprint(d.Attempts), timeCell(str(d.NextAttemptAt)),
			timeCell(str(d.FinishedAt)), lane, shorten(d.LastError, 80))
	}
	t.flush()
}

func isUUID(s string) bool {
	// The canonical form only, as the API's paths take it.
	if len(s) != 36 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch i {
		case 8, 13, 18, 23:
			if c != '-' {
				return false
			}
		default:
			if (c < '0' || c > '9') && (c < 'a' || c > 'f') && (c < 'A' || c > 'F') {
				return false
			}
		}
	}
	return true
}

func str(p *string) string {
	if p == nil {
		return ""
	}
	return *p
}

// timeCell shows an RFC 3339 time in UTC to the second.
func timeCell(s string) string {
	if s == "" {
		return ""
	}
	t, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		return s
	}
	return t.UTC().Format(time.RFC3339)
}

// oneLine keeps text from breaking a table's rows and columns.
func oneLine(s string) string {
	return strings.Join(strings.Fields(s), " ")
}

func shorten(s string, n int) string {
	s = oneLine(s)
	if r := []rune(s); len(r) > n {
		return string(r[:n-1]) + "…"
	}
	return s
}

// shellQuote quotes s for a shell when it holds anything but safe letters.
func shellQuote(s string) string {
	safe := s != ""
	for _, r := range s {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("-_=.:/+", r)) {
			safe = false
			break
		}
	}
	if safe {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// table writes aligned columns through a tabwriter; empty cells show as
// "-", and no cell can hold a tab or a line break.
type table struct {
	tw *tabwriter.Writer
}

func newTable(w io.Writer, header ...string) *table {
	t := &table{tw: tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)}
	if len(header) > 0 {
		t.row(header...)
	}
	return t
}

func (t *table) row(cells ...string) {
	for i, c := range cells {
		if c = oneLine(c); c == "" {
			c = "-"
		}
		if i > 0 {
			io.WriteString(t.tw, "\t")
		}
		io.WriteString(t.tw, c)
	}
	io.WriteString(t.tw, "\n")
}

func (t *table) flush() { t.tw.Flush() }

// flagSet is a flag.FlagSet whose flags may come before, between or after
// the positional arguments: `waybill messages show ID --server URL`.
type flagSet struct {
	*flag.FlagSet
	usage string
}

var errHelp = flag.ErrHelp

func newFlagSet(name string, stderr io.Writer) *flagSet {
	fs := &flagSet{FlagSet: flag.NewFlagSet(name, flag.ContinueOnError)}
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprintf(stderr, "usage: %s\n\nflags:\n", fs.usage)
		fs.PrintDefaults()
	}
	return fs
}

// parse parses the flags wherever they are and returns the other
// arguments in order; after "--" everything is an argument.
func (fs *flagSet) parse(args []string) ([]string, error) {
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			return nil, err
		}
		rest := fs.Args()
		if len(rest) == 0 {
			return pos, nil
		}
		// Parse stops at "--" too, and drops it.
		if n := len(args) - len(rest); n > 0 && args[n-1] == "--" {
			return append(pos, rest...), nil
		}
		pos = append(pos, rest[0])
		args = rest[1:]
	}
}
