package main

import (
	"context"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nubes-io/nubes/pkg/devinfra"
	"github.com/nubes-io/nubes/pkg/events"
	"github.com/nubes-io/nubes/pkg/mailtest"
	"github.com/nubes-io/nubes/pkg/testkit"
)

// The binary as an operator runs it: configured by environment only, no
// JWK set, mail written to a directory; it serves the probes and stops on
// SIGINT.
func TestBinary(t *testing.T) {
	dir := t.TempDir()
	mongo, err := devinfra.StartMongo(filepath.Join(dir, "mongo"), "127.0.0.1:0", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer mongo.Stop()
	nats, err := devinfra.StartNATS(filepath.Join(dir, "nats"), "127.0.0.1", 0)
	if err != nil {
		t.Fatal(err)
	}
	defer nats.Stop()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	_ = ln.Close()
	mailDir := filepath.Join(dir, "mail")
	for k, v := range map[string]string{
		"NUBES_HTTP_ADDR": addr, "NUBES_MONGO_URI": mongo.URI, "NUBES_NATS_URL": nats.URL,
		"NUBES_MAIL_DIR": mailDir, "NUBES_LOG_LEVEL": "error", "NUBES_LOG_FORMAT": "json", "NUBES_DRAIN_DELAY": "0s",
		"NUBES_SMTP_FROM": "noreply@example.com",
	} {
		t.Setenv(k, v)
	}

	exit := make(chan int, 1)
	go func() { exit <- run() }()
	testkit.Eventually(t, 20*time.Second, "mailer not healthy", func() bool {
		select {
		case code := <-exit:
			t.Fatalf("mailer exited with %d", code)
		default:
		}
		resp, err := http.Get("http://" + addr + "/healthz")
		if err != nil {
			return false
		}
		_ = resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	})
	for _, p := range []string{"/readyz", "/metrics"} {
		resp, err := http.Get("http://" + addr + p)
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		_ = resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("%s: %d", p, resp.StatusCode)
		}
	}

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	bus, err := events.Connect(ctx, nats.URL, "test", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer bus.NC.Close()
	m := events.Mail{ID: "mail-binary00001", To: "a@example.org", Language: "ko", Template: events.MailVerifyEmail, Data: map[string]string{"code": "123456"}}
	if err := bus.Publish(ctx, events.MailSubject, m.ID, m); err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(mailDir, m.ID+".eml")
	var raw []byte
	testkit.Eventually(t, 20*time.Second, file+" not written", func() bool {
		raw, err = os.ReadFile(file)
		return err == nil
	})
	msg, err := mailtest.Parse(raw)
	if err != nil || msg.MessageID != m.ID+"@example.com" || !strings.Contains(msg.Body, "123456") {
		t.Fatalf("%s: %v %+v", file, err, msg)
	}

	if err := syscall.Kill(os.Getpid(), syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	select {
	case code := <-exit:
		if code != 0 {
			t.Fatalf("exit %d", code)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("mailer did not stop on SIGINT")
	}
}
