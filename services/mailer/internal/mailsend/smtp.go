package mailsend

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/smtp"
	"net/textproto"
	"os"
	"strconv"
	"time"
)

// TLS modes of an SMTP connection.
const (
	TLSNone     = "none"     // plain text (local relays only)
	TLSStartTLS = "starttls" // plain connect, then STARTTLS, required (port 587)
	TLSImplicit = "tls"      // TLS from the first byte (port 465)
)

// SMTPConfig configures an SMTPSender.
type SMTPConfig struct {
	Host     string
	Port     int
	TLS      string // TLSNone, TLSStartTLS or TLSImplicit
	Username string // AUTH PLAIN when set
	Password string
	Timeout  time.Duration // whole conversation (default 30s)
	// TLSConfig overrides the client TLS configuration (tests trust a
	// private CA with it). ServerName defaults to Host.
	TLSConfig *tls.Config
}

// SMTPSender sends each message over a new SMTP connection.
type SMTPSender struct {
	cfg  SMTPConfig
	helo string
}

// NewSMTPSender checks cfg and returns a sender.
func NewSMTPSender(cfg SMTPConfig) (*SMTPSender, error) {
	if cfg.Host == "" {
		return nil, errors.New("smtp: host is required")
	}
	if cfg.Port <= 0 || cfg.Port > 65535 {
		return nil, fmt.Errorf("smtp: bad port %d", cfg.Port)
	}
	switch cfg.TLS {
	case TLSNone, TLSStartTLS, TLSImplicit:
	default:
		return nil, fmt.Errorf("smtp: tls must be none, starttls or tls, not %q", cfg.TLS)
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = 30 * time.Second
	}
	helo, err := os.Hostname()
	if err != nil || helo == "" {
		helo = "localhost"
	}
	return &SMTPSender{cfg: cfg, helo: helo}, nil
}

func (s *SMTPSender) tlsConfig() *tls.Config {
	c := &tls.Config{MinVersion: tls.VersionTLS12}
	if s.cfg.TLSConfig != nil {
		c = s.cfg.TLSConfig.Clone()
	}
	if c.ServerName == "" {
		c.ServerName = s.cfg.Host
	}
	return c
}

// Send delivers m and returns nil only when the server accepted it (250
// after DATA). A 5xx refusal of the recipient or the content is a
// PermanentError; everything else (connection, TLS, authentication, 4xx)
// is worth retrying.
func (s *SMTPSender) Send(ctx context.Context, m *Message) (err error) {
	ctx, cancel := context.WithTimeout(ctx, s.cfg.Timeout)
	defer cancel()
	addr := net.JoinHostPort(s.cfg.Host, strconv.Itoa(s.cfg.Port))
	d := &net.Dialer{}
	var conn net.Conn
	if s.cfg.TLS == TLSImplicit {
		conn, err = (&tls.Dialer{NetDialer: d, Config: s.tlsConfig()}).DialContext(ctx, "tcp", addr)
	} else {
		conn, err = d.DialContext(ctx, "tcp", addr)
	}
	if err != nil {
		return fmt.Errorf("smtp connect %s: %w", addr, err)
	}
	defer conn.Close()
	if dl, ok := ctx.Deadline(); ok {
		_ = conn.SetDeadline(dl)
	}
	stop := context.AfterFunc(ctx, func() { _ = conn.Close() }) // cancellation interrupts a blocked read
	defer stop()

	c, err := smtp.NewClient(conn, s.cfg.Host)
	if err != nil {
		return fmt.Errorf("smtp greeting: %w", err)
	}
	defer c.Close()
	if err := c.Hello(s.helo); err != nil {
		return fmt.Errorf("smtp EHLO: %w", err)
	}
	if s.cfg.TLS == TLSStartTLS {
		if ok, _ := c.Extension("STARTTLS"); !ok {
			return errors.New("smtp: server does not offer STARTTLS (smtp_tls is starttls)")
		}
		if err := c.StartTLS(s.tlsConfig()); err != nil {
			return fmt.Errorf("smtp STARTTLS: %w", err)
		}
	}
	if s.cfg.Username != "" {
		if ok, _ := c.Extension("AUTH"); !ok {
			return errors.New("smtp: server does not offer AUTH but a username is configured")
		}
		// PlainAuth refuses to send the password over a plain connection
		// to anything but localhost.
		if err := c.Auth(smtp.PlainAuth("", s.cfg.Username, s.cfg.Password, s.cfg.Host)); err != nil {
			return fmt.Errorf("smtp AUTH: %w", err)
		}
	}
	if err := c.Mail(m.From); err != nil {
		return fmt.Errorf("smtp MAIL FROM: %w", err)
	}
	if err := c.Rcpt(m.To); err != nil {
		return classify("RCPT TO", err)
	}
	w, err := c.Data()
	if err != nil {
		return classify("DATA", err)
	}
	if _, err := w.Write(m.Raw); err != nil {
		return fmt.Errorf("smtp DATA: %w", err)
	}
	if err := w.Close(); err != nil { // the server's verdict on the message
		return classify("DATA", err)
	}
	_ = c.Quit() // accepted: a failing QUIT changes nothing
	return nil
}

// classify marks a 5xx reply to RCPT or DATA as permanent.
func classify(stage string, err error) error {
	err = fmt.Errorf("smtp %s: %w", stage, err)
	var te *textproto.Error
	if errors.As(err, &te) && te.Code >= 500 {
		return &PermanentError{Err: err}
	}
	return err
}
