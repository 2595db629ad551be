package mailtest_test

import (
	"crypto/tls"
	"errors"
	"net/smtp"
	"net/textproto"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/nubes-io/nubes/pkg/mailtest"
)

const sample = "From: a@example.com\r\nTo: b@example.com\r\nSubject: =?UTF-8?B?7JWI64WV?=\r\n" +
	"Message-ID: <mail-1@example.com>\r\nContent-Type: text/plain; charset=UTF-8\r\n" +
	"Content-Transfer-Encoding: quoted-printable\r\n\r\nHello =EC=95=88=EB=85=95\r\n.leading dot\r\n"

func TestRecordsAndParses(t *testing.T) {
	s := mailtest.Start(t)
	if err := smtp.SendMail(s.Addr, nil, "a@example.com", []string{"b@example.com", "c@example.com"}, []byte(sample)); err != nil {
		t.Fatal(err)
	}
	m := s.Wait(t, 1, 5*time.Second)[0]
	if m.From != "a@example.com" || strings.Join(m.To, ",") != "b@example.com,c@example.com" {
		t.Errorf("envelope %q %q", m.From, m.To)
	}
	if m.MessageID != "mail-1@example.com" || m.Subject != "안녕" || m.Body != "Hello 안녕\n.leading dot\n" {
		t.Errorf("parsed %q %q %q", m.MessageID, m.Subject, m.Body)
	}
	if m.Header.Get("To") != "b@example.com" {
		t.Errorf("header To %q", m.Header.Get("To"))
	}
}

func TestFailNext(t *testing.T) {
	s := mailtest.Start(t)
	s.FailNext(2)
	for i := range 2 {
		err := smtp.SendMail(s.Addr, nil, "a@example.com", []string{"b@example.com"}, []byte(sample))
		var te *textproto.Error
		if !errors.As(err, &te) || te.Code != 451 {
			t.Fatalf("attempt %d: %v, want 451", i, err)
		}
	}
	if err := smtp.SendMail(s.Addr, nil, "a@example.com", []string{"b@example.com"}, []byte(sample)); err != nil {
		t.Fatal(err)
	}
	s.FailNextWith(1, 550, "5.1.1 No such user")
	err := smtp.SendMail(s.Addr, nil, "a@example.com", []string{"b@example.com"}, []byte(sample))
	var te *textproto.Error
	if !errors.As(err, &te) || te.Code != 550 {
		t.Fatalf("got %v, want 550", err)
	}
	if s.Count() != 1 || s.Attempts() != 4 {
		t.Fatalf("count %d attempts %d", s.Count(), s.Attempts())
	}
}

func TestSTARTTLSAndAuth(t *testing.T) {
	cfg, pool, err := mailtest.SelfSigned()
	if err != nil {
		t.Fatal(err)
	}
	s := mailtest.StartWith(t, mailtest.Options{TLSConfig: cfg, Username: "u", Password: "p"})
	dial := func() *smtp.Client {
		c, err := smtp.Dial(s.Addr)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = c.Close() })
		if err := c.StartTLS(&tls.Config{ServerName: "127.0.0.1", RootCAs: pool}); err != nil {
			t.Fatal(err)
		}
		return c
	}
	c := dial()
	if err := c.Mail("a@example.com"); err == nil {
		t.Fatal("MAIL accepted before AUTH")
	}
	if err := c.Auth(smtp.PlainAuth("", "u", "wrong", "127.0.0.1")); err == nil {
		t.Fatal("wrong password accepted")
	}
	c = dial()
	if err := c.Auth(smtp.PlainAuth("", "u", "p", "127.0.0.1")); err != nil {
		t.Fatal(err)
	}
	if err := c.Mail("a@example.com"); err != nil {
		t.Fatal(err)
	}
	if err := c.Rcpt("b@example.com"); err != nil {
		t.Fatal(err)
	}
	w, err := c.Data()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.Write([]byte(sample)); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	_ = c.Quit()
	m := s.Wait(t, 1, 5*time.Second)[0]
	if !m.TLS || m.AuthUser != "u" {
		t.Fatalf("TLS %v user %q", m.TLS, m.AuthUser)
	}
}

func TestWaitTimesOut(t *testing.T) {
	s := mailtest.Start(t)
	ft := &fakeT{TB: t}
	done := make(chan struct{})
	go func() {
		defer close(done)
		s.Wait(ft, 1, 50*time.Millisecond)
	}()
	<-done
	if !ft.failed {
		t.Fatal("Wait did not fail")
	}
}

type fakeT struct {
	testing.TB
	failed bool
}

func (f *fakeT) Helper() {}
func (f *fakeT) Fatalf(string, ...any) {
	f.failed = true
	runtime.Goexit()
}
