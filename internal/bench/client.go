package bench

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"strconv"
	"strings"
	"time"
)

// client calls the REST API of the bench's server.
type client struct {
	ctx   context.Context
	base  string
	token string
	http  *http.Client
}

// newClient waits for the server to be ready and reads its admin token.
func newClient(ctx context.Context, base, tokenFile string, conns int, served <-chan error) (*client, error) {
	deadline := time.Now().Add(time.Minute)
	for {
		resp, err := http.Get(base + "/readyz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				break
			}
		}
		select {
		case err := <-served:
			return nil, fmt.Errorf("the server stopped: %v", err)
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return nil, errors.New("the server was not ready within a minute")
		}
	}
	token, err := os.ReadFile(tokenFile)
	if err != nil {
		return nil, err
	}
	return &client{ctx: ctx, base: base, token: strings.TrimSpace(string(token)),
		http: &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: conns}}}, nil
}

// post sends body and returns the id of the resource created.
func (c *client) post(path string, body any) (string, error) {
	data, err := json.Marshal(body)
	if err != nil {
		return "", err
	}
	req, err := http.NewRequestWithContext(c.ctx, http.MethodPost, c.base+"/api/v1"+path, bytes.NewReader(data))
	if err != nil {
		return "", err
	}
	req.Header.Set("Authorization", "Bearer "+c.token)
	req.Header.Set("Content-Type", "application/json")
	resp, err := c.http.Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	answer, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusCreated {
		return "", fmt.Errorf("POST %s: %s: %s", path, resp.Status, answer)
	}
	return createdID(answer), nil
}

// createdID reads the id of a created resource, the first member of the
// answer's object, and leaves the rest unread: the bench's clients share
// the machine with the server they measure. It is "" when the answer does
// not begin so.
func createdID(answer []byte) string {
	dec := json.NewDecoder(bytes.NewReader(answer))
	if t, err := dec.Token(); err != nil || t != json.Delim('{') {
		return ""
	}
	if k, err := dec.Token(); err != nil || k != "id" {
		return ""
	}
	id, _ := dec.Token()
	s, _ := id.(string)
	return s
}

// put replaces the resource at path with body.
func (c *client) put(path string, body any) error {
	data, err := json.Marshal(body)
	if err != nil {
		return err
	}
	req, err := http.NewRequestWithContext(c.ctx, http.MethodPut, c.base+"/api/v1"+path, bytes.NewReader(data))
	if err != nil {
		return err
	}
	req.Header.Set("Authorization", "Bearer "+c.token)
	req.Header.Set("Content-Type", "application/json")
	resp, err := c.http.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		answer, _ := io.ReadAll(resp.Body)
		return fmt.Errorf("PUT %s: %s: %s", path, resp.Status, answer)
	}
	return nil
}

// waitSettled polls the statistics until no message is in flight.
func (c *client) waitSettled(ctx context.Context) error {
	for {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.base+"/api/v1/stats", nil)
		if err != nil {
			return err
		}
		req.Header.Set("Authorization", "Bearer "+c.token)
		resp, err := c.http.Do(req)
		if err != nil {
			return err
		}
		var stats struct {
			InFlight int `json:"in_flight_messages"`
		}
		err = json.NewDecoder(resp.Body).Decode(&stats)
		resp.Body.Close()
		if err != nil {
			return fmt.Errorf("stats: %w", err)
		}
		if stats.InFlight == 0 {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(5 * time.Millisecond):
		}
	}
}

// feedLag is the largest waybill_feed_lag_seconds the server's metrics
// show; they take a token, as the API does.
func (c *client) feedLag() (float64, error) {
	req, err := http.NewRequestWithContext(c.ctx, http.MethodGet, c.base+"/metrics", nil)
	if err != nil {
		return 0, err
	}
	req.Header.Set("Authorization", "Bearer "+c.token)
	resp, err := c.http.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return 0, errors.New(resp.Status)
	}
	lag := 0.0
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		if line := sc.Text(); strings.HasPrefix(line, "waybill_feed_lag_seconds{") {
			if v, err := strconv.ParseFloat(line[strings.LastIndexByte(line, ' ')+1:], 64); err == nil {
				lag = max(lag, v)
			}
		}
	}
	return lag, sc.Err()
}
