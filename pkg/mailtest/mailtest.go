// Package mailtest is an SMTP server for tests: it listens on
// 127.0.0.1:0 inside the test process, records every message it accepts
// (envelope, raw data, parsed headers and decoded text body), and can be
// told to refuse the next deliveries (a 4xx or 5xx reply at the end of
// DATA, where a real server decides) or to answer slowly, so a test can
// drive a sender's retries. It speaks enough ESMTP for net/smtp: EHLO,
// STARTTLS and implicit TLS, AUTH PLAIN, MAIL, RCPT, DATA, RSET, NOOP,
// QUIT.
//
// Only tests import it.
package mailtest

import (
	"bufio"
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"math/big"
	"mime"
	"mime/quotedprintable"
	"net"
	"net/mail"
	"net/textproto"
	"strings"
	"sync"
	"testing"
	"time"
)

// Options configure a Server.
type Options struct {
	// TLSConfig, when set, makes the server offer STARTTLS, or speak TLS
	// from the first byte with ImplicitTLS.
	TLSConfig   *tls.Config
	ImplicitTLS bool
	// Username and Password, when set, make AUTH PLAIN required before MAIL.
	Username, Password string
}

// Message is one message the server accepted.
type Message struct {
	From      string   // envelope sender (MAIL FROM)
	To        []string // envelope recipients (RCPT TO)
	Data      []byte   // the message as received (CRLF line ends, dots unstuffed)
	Header    mail.Header
	MessageID string // Message-ID without the angle brackets
	Subject   string // decoded (RFC 2047)
	Body      string // decoded text body (quoted-printable or base64), LF line ends
	TLS       bool   // the session was encrypted
	AuthUser  string // the user that authenticated, if any
}

// Server is a running test SMTP server.
type Server struct {
	Addr string // 127.0.0.1:port
	Host string
	Port int

	opts Options
	ln   net.Listener
	wg   sync.WaitGroup

	mu       sync.Mutex
	msgs     []Message
	attempts int
	failN    int
	failCode int
	failText string
	delay    time.Duration
	changed  chan struct{} // closed and replaced when a message arrives
	conns    map[net.Conn]struct{}
	closed   bool
	done     chan struct{} // closed by Close
}

// Start runs a server for the test and stops it when the test ends.
func Start(t testing.TB) *Server { return StartWith(t, Options{}) }

// StartWith is Start with options.
func StartWith(t testing.TB, opts Options) *Server {
	t.Helper()
	s, err := New(opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

// New starts a server on 127.0.0.1:0. Close stops it.
func New(opts Options) (*Server, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	if opts.ImplicitTLS {
		if opts.TLSConfig == nil {
			_ = ln.Close()
			return nil, errors.New("mailtest: ImplicitTLS needs a TLSConfig")
		}
		ln = tls.NewListener(ln, opts.TLSConfig)
	}
	addr := ln.Addr().(*net.TCPAddr)
	s := &Server{Addr: addr.String(), Host: addr.IP.String(), Port: addr.Port, opts: opts, ln: ln,
		changed: make(chan struct{}), conns: map[net.Conn]struct{}{}, done: make(chan struct{})}
	s.wg.Add(1)
	go s.accept()
	return s, nil
}

// Close stops the server and closes every open session.
func (s *Server) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	close(s.done)
	err := s.ln.Close()
	for c := range s.conns {
		_ = c.Close()
	}
	s.mu.Unlock()
	s.wg.Wait()
	return err
}

// FailNext makes the next n deliveries fail with a temporary error (451).
func (s *Server) FailNext(n int) { s.FailNextWith(n, 451, "4.3.0 Try again later") }

// FailNextWith makes the next n deliveries fail with code and text, for
// example 550 "5.1.1 No such user" for a permanent refusal.
func (s *Server) FailNextWith(n, code int, text string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.failN, s.failCode, s.failText = n, code, text
}

// SetDelay makes the server wait d before answering each DATA.
func (s *Server) SetDelay(d time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.delay = d
}

// Messages returns the accepted messages, oldest first.
func (s *Server) Messages() []Message {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Message(nil), s.msgs...)
}

// Count is the number of accepted messages.
func (s *Server) Count() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.msgs)
}

// Attempts is the number of messages received to the end of DATA,
// accepted or refused.
func (s *Server) Attempts() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.attempts
}

// Wait waits until at least n messages were accepted and returns them; it
// fails the test after timeout.
func (s *Server) Wait(t testing.TB, n int, timeout time.Duration) []Message {
	t.Helper()
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	for {
		s.mu.Lock()
		got, ch := len(s.msgs), s.changed
		s.mu.Unlock()
		if got >= n {
			return s.Messages()
		}
		select {
		case <-ch:
		case <-deadline.C:
			t.Fatalf("mailtest: %d of %d messages after %s (%d attempts)", got, n, timeout, s.Attempts())
			return nil
		}
	}
}

func (s *Server) accept() {
	defer s.wg.Done()
	for {
		c, err := s.ln.Accept()
		if err != nil {
			return
		}
		s.mu.Lock()
		if s.closed {
			s.mu.Unlock()
			_ = c.Close()
			return
		}
		s.conns[c] = struct{}{}
		s.wg.Add(1)
		s.mu.Unlock()
		go func() {
			defer s.wg.Done()
			s.serve(c)
			s.mu.Lock()
			delete(s.conns, c)
			s.mu.Unlock()
			_ = c.Close()
		}()
	}
}

// session is the state of one SMTP conversation.
type session struct {
	conn     net.Conn
	tp       *textproto.Conn
	tls      bool
	helo     bool
	authUser string
	from     string
	to       []string
	inMail   bool
}

func (s *Server) serve(c net.Conn) {
	ss := &session{conn: c, tp: textproto.NewConn(c)}
	if _, ok := c.(*tls.Conn); ok {
		ss.tls = true
	}
	_ = c.SetDeadline(time.Now().Add(time.Minute))
	reply := func(code int, format string, args ...any) bool {
		return ss.tp.PrintfLine("%d %s", code, fmt.Sprintf(format, args...)) == nil
	}
	if !reply(220, "mailtest ESMTP ready") {
		return
	}
	for {
		line, err := ss.tp.ReadLine()
		if err != nil {
			return
		}
		verb, arg, _ := strings.Cut(line, " ")
		switch strings.ToUpper(verb) {
		case "EHLO":
			ss.helo = true
			ss.resetTxn()
			ext := []string{"mailtest", "8BITMIME", "SIZE 10485760"}
			if s.opts.TLSConfig != nil && !ss.tls {
				ext = append(ext, "STARTTLS")
			}
			if s.opts.Username != "" {
				ext = append(ext, "AUTH PLAIN")
			}
			for i, e := range ext {
				sep := "-"
				if i == len(ext)-1 {
					sep = " "
				}
				if ss.tp.PrintfLine("250%s%s", sep, e) != nil {
					return
				}
			}
		case "HELO":
			ss.helo = true
			ss.resetTxn()
			reply(250, "mailtest")
		case "STARTTLS":
			if s.opts.TLSConfig == nil || ss.tls {
				reply(502, "5.5.1 STARTTLS not available")
				continue
			}
			if !reply(220, "2.0.0 Ready to start TLS") {
				return
			}
			tc := tls.Server(c, s.opts.TLSConfig)
			if err := tc.Handshake(); err != nil {
				return
			}
			ss.conn, ss.tp, ss.tls, ss.helo = tc, textproto.NewConn(tc), true, false
			ss.resetTxn()
		case "AUTH":
			if !s.auth(ss, arg) {
				return
			}
		case "MAIL":
			switch {
			case !ss.helo:
				reply(503, "5.5.1 EHLO first")
			case s.opts.Username != "" && ss.authUser == "":
				reply(530, "5.7.0 Authentication required")
			case ss.inMail:
				reply(503, "5.5.1 Nested MAIL")
			default:
				addr, ok := pathArg(arg, "FROM:")
				if !ok {
					reply(501, "5.5.4 Syntax: MAIL FROM:<address>")
					continue
				}
				ss.from, ss.inMail = addr, true
				reply(250, "2.1.0 OK")
			}
		case "RCPT":
			if !ss.inMail {
				reply(503, "5.5.1 MAIL first")
				continue
			}
			addr, ok := pathArg(arg, "TO:")
			if !ok || addr == "" {
				reply(501, "5.5.4 Syntax: RCPT TO:<address>")
				continue
			}
			ss.to = append(ss.to, addr)
			reply(250, "2.1.5 OK")
		case "DATA":
			if len(ss.to) == 0 {
				reply(503, "5.5.1 RCPT first")
				continue
			}
			if !reply(354, "End data with <CR><LF>.<CR><LF>") {
				return
			}
			data, err := ss.tp.ReadDotBytes()
			if err != nil {
				return
			}
			code, text := s.deliver(ss, normalizeCRLF(data))
			ss.resetTxn()
			if !reply(code, "%s", text) {
				return
			}
		case "RSET":
			ss.resetTxn()
			reply(250, "2.0.0 OK")
		case "NOOP":
			reply(250, "2.0.0 OK")
		case "VRFY":
			reply(252, "2.5.0 Cannot VRFY")
		case "QUIT":
			reply(221, "2.0.0 Bye")
			return
		default:
			reply(500, "5.5.2 Unknown command")
		}
	}
}

func (ss *session) resetTxn() { ss.from, ss.to, ss.inMail = "", nil, false }

// auth handles AUTH PLAIN and reports whether the session goes on.
func (s *Server) auth(ss *session, arg string) bool {
	mech, initial, _ := strings.Cut(arg, " ")
	if s.opts.Username == "" || !strings.EqualFold(mech, "PLAIN") {
		return ss.tp.PrintfLine("504 5.5.4 Unrecognized authentication type") == nil
	}
	if ss.authUser != "" {
		return ss.tp.PrintfLine("503 5.5.1 Already authenticated") == nil
	}
	if initial == "" {
		if ss.tp.PrintfLine("334 ") != nil {
			return false
		}
		l, err := ss.tp.ReadLine()
		if err != nil {
			return false
		}
		initial = l
	}
	raw, err := base64.StdEncoding.DecodeString(initial)
	if err != nil {
		return ss.tp.PrintfLine("501 5.5.2 Cannot decode response") == nil
	}
	parts := bytes.Split(raw, []byte{0})
	if len(parts) != 3 || string(parts[1]) != s.opts.Username || string(parts[2]) != s.opts.Password {
		return ss.tp.PrintfLine("535 5.7.8 Authentication credentials invalid") == nil
	}
	ss.authUser = string(parts[1])
	return ss.tp.PrintfLine("235 2.7.0 Authentication successful") == nil
}

// deliver records (or refuses) one message and returns the reply.
func (s *Server) deliver(ss *session, data []byte) (int, string) {
	s.mu.Lock()
	delay := s.delay
	s.mu.Unlock()
	if delay > 0 {
		t := time.NewTimer(delay)
		select {
		case <-t.C:
		case <-s.done:
			t.Stop()
			return 421, "4.3.2 Shutting down"
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.attempts++
	if s.failN > 0 {
		s.failN--
		return s.failCode, s.failText
	}
	m, err := Parse(data)
	if err != nil {
		return 554, "5.6.0 Malformed message: " + strings.ReplaceAll(err.Error(), "\n", " ")
	}
	m.From, m.To, m.TLS, m.AuthUser = ss.from, append([]string(nil), ss.to...), ss.tls, ss.authUser
	s.msgs = append(s.msgs, m)
	close(s.changed)
	s.changed = make(chan struct{})
	return 250, fmt.Sprintf("2.0.0 OK queued as %d", len(s.msgs))
}

// pathArg extracts the address of "FROM:<a@b> SIZE=..." after prefix.
func pathArg(arg, prefix string) (string, bool) {
	if len(arg) < len(prefix) || !strings.EqualFold(arg[:len(prefix)], prefix) {
		return "", false
	}
	rest := strings.TrimSpace(arg[len(prefix):])
	if !strings.HasPrefix(rest, "<") {
		return "", false
	}
	end := strings.IndexByte(rest, '>')
	if end < 0 {
		return "", false
	}
	return rest[1:end], true
}

// normalizeCRLF turns the LF line ends textproto leaves into CRLF, as the
// message was on the wire.
func normalizeCRLF(b []byte) []byte {
	b = bytes.ReplaceAll(b, []byte("\r\n"), []byte("\n"))
	return bytes.ReplaceAll(b, []byte("\n"), []byte("\r\n"))
}

// Parse reads an RFC 5322 message (as received, or an .eml file) into a
// Message: headers, Message-ID, decoded Subject and decoded text body.
func Parse(raw []byte) (Message, error) {
	msg, err := mail.ReadMessage(bytes.NewReader(raw))
	if err != nil {
		return Message{}, err
	}
	m := Message{Data: raw, Header: msg.Header}
	m.MessageID = strings.Trim(strings.TrimSpace(msg.Header.Get("Message-ID")), "<>")
	dec := new(mime.WordDecoder)
	if m.Subject, err = dec.DecodeHeader(msg.Header.Get("Subject")); err != nil {
		return Message{}, fmt.Errorf("subject: %w", err)
	}
	var body io.Reader = msg.Body
	switch strings.ToLower(strings.TrimSpace(msg.Header.Get("Content-Transfer-Encoding"))) {
	case "quoted-printable":
		body = quotedprintable.NewReader(body)
	case "base64":
		body = base64.NewDecoder(base64.StdEncoding, &stripNewlines{r: bufio.NewReader(body)})
	}
	b, err := io.ReadAll(body)
	if err != nil {
		return Message{}, fmt.Errorf("body: %w", err)
	}
	m.Body = strings.ReplaceAll(string(b), "\r\n", "\n")
	return m, nil
}

// stripNewlines drops CR and LF, for a base64 body split into lines.
type stripNewlines struct{ r *bufio.Reader }

func (s *stripNewlines) Read(p []byte) (int, error) {
	n := 0
	for n < len(p) {
		c, err := s.r.ReadByte()
		if err != nil {
			if n > 0 {
				return n, nil
			}
			return 0, err
		}
		if c != '\r' && c != '\n' {
			p[n] = c
			n++
		}
	}
	return n, nil
}

// SelfSigned returns a server TLS config with a fresh certificate for
// 127.0.0.1 and localhost, and a pool that trusts it, for a client.
func SelfSigned() (*tls.Config, *x509.CertPool, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(time.Now().UnixNano()),
		Subject:      pkix.Name{CommonName: "mailtest"},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(24 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		IsCA:         true, BasicConstraintsValid: true,
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")},
		DNSNames:    []string{"localhost"},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, nil, err
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, nil, err
	}
	pool := x509.NewCertPool()
	pool.AddCert(cert)
	cfg := &tls.Config{Certificates: []tls.Certificate{{Certificate: [][]byte{der}, PrivateKey: key, Leaf: cert}}, MinVersion: tls.VersionTLS12}
	return cfg, pool, nil
}
