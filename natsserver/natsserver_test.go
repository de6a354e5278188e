package natsserver_test

import (
	"context"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/waybill/waybill/natsserver"
	"github.com/waybill/waybill/service"
)

// roundTrip publishes on one connection and waits for it on another.
func roundTrip(t *testing.T, pub, sub *nats.Conn) {
	t.Helper()
	s, err := sub.SubscribeSync("waybill.test")
	if err != nil {
		t.Fatal(err)
	}
	// The subscription must reach the server before the publish does.
	if err := sub.Flush(); err != nil {
		t.Fatal(err)
	}
	if err := pub.Publish("waybill.test", []byte("hello")); err != nil {
		t.Fatal(err)
	}
	msg, err := s.NextMsg(10 * time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if string(msg.Data) != "hello" {
		t.Errorf("got %q", msg.Data)
	}
}

func TestInProcess(t *testing.T) {
	t.Parallel()
	srv := natsserver.New(natsserver.Config{})
	if err := srv.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	defer srv.Stop(context.Background())
	pub, err := srv.Connect()
	if err != nil {
		t.Fatal(err)
	}
	defer pub.Close()
	sub, err := srv.Connect()
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	roundTrip(t, pub, sub)
}

func TestListen(t *testing.T) {
	t.Parallel()
	srv := natsserver.New(natsserver.Config{Listen: "127.0.0.1:0"})
	if err := srv.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	defer srv.Stop(context.Background())
	if strings.HasSuffix(srv.ClientURL(), ":0") || strings.HasSuffix(srv.ClientURL(), ":-1") {
		t.Fatalf("client URL %s names no port", srv.ClientURL())
	}
	outside, err := nats.Connect(srv.ClientURL(), nats.Timeout(10*time.Second))
	if err != nil {
		t.Fatalf("connect to %s: %v", srv.ClientURL(), err)
	}
	defer outside.Close()
	inside, err := srv.Connect()
	if err != nil {
		t.Fatal(err)
	}
	defer inside.Close()
	roundTrip(t, inside, outside)
	roundTrip(t, outside, inside)
}

// TestStopTwice: the server is a service.Service; Stop before Start does
// nothing, Stop is safe twice, and a Start after Stop is refused.
func TestStopTwice(t *testing.T) {
	t.Parallel()
	var _ service.Service = (*natsserver.Server)(nil)
	natsserver.New(natsserver.Config{}).Stop(t.Context())
	srv := natsserver.New(natsserver.Config{Listen: "127.0.0.1:0"})
	if err := srv.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	if err := srv.Start(t.Context()); err == nil {
		t.Error("a second Start succeeded")
	}
	nc, err := srv.Connect()
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	srv.Stop(t.Context())
	srv.Stop(t.Context())
	if _, err := nats.Connect(srv.ClientURL(), nats.Timeout(time.Second)); err == nil {
		t.Error("the server takes connections after Stop")
	}
}

func TestBadListenAddress(t *testing.T) {
	t.Parallel()
	// A port another listener holds.
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()

	for _, addr := range []string{"127.0.0.1", "127.0.0.1:http-ish", "127.0.0.1:99999", busy.Addr().String()} {
		began := time.Now()
		srv := natsserver.New(natsserver.Config{Listen: addr})
		err := srv.Start(t.Context())
		if err == nil {
			srv.Stop(t.Context())
			t.Errorf("%s: started", addr)
			continue
		}
		t.Log(err)
		if !strings.Contains(err.Error(), addr) {
			t.Errorf("%s: error does not name it: %v", addr, err)
		}
		// A listener that cannot be opened is known at once; it must not
		// look like a server slow to start.
		if d := time.Since(began); d > 5*time.Second {
			t.Errorf("%s: refused after %s", addr, d)
		}
	}
}
