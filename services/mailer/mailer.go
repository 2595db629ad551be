// Package mailer is the mail worker: it consumes mail events
// (events.MailStream, durable consumer events.MailConsumer), renders each
// in the user's language and sends it over SMTP, or writes it to a
// directory of .eml files when no SMTP host is configured (the devstack).
//
// Delivery is at least once from the producer (an outbox relay) to the
// mailer, and made exactly once at the mailer by the mail id (see
// worker.go): a message is acked only after the SMTP server accepted it
// and its id is recorded in the events.MailSentBucket key-value bucket; a
// redelivered or republished mail whose id is recorded is acked without
// sending. Failures are retried with a growing delay (NakWithDelay) up to
// MaxDeliver deliveries; then, or at once for a mail that cannot be
// rendered or that the server refuses permanently, the mail is published
// to events.MailDeadSubject with the reason and terminated.
//
// New is the public surface: the devstack and cmd/mailer build the
// service with it.
package mailer

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net/mail"
	"strings"
	"time"

	"github.com/nubes-io/nubes/pkg/app"
	"github.com/nubes-io/nubes/pkg/auth"
	"github.com/nubes-io/nubes/pkg/config"
	"github.com/nubes-io/nubes/pkg/errs"
	"github.com/nubes-io/nubes/pkg/seal"
	"github.com/nubes-io/nubes/pkg/seal/sealcmd"
	"github.com/nubes-io/nubes/services/mailer/internal/mailrender"
	"github.com/nubes-io/nubes/services/mailer/internal/mailsend"
)

// Name is the service name.
const Name = "mailer"

// Config of the mailer, declared once: keys are flat so each has its
// NUBES_ variable (smtp_host is NUBES_SMTP_HOST), and each field's default
// is in its tag. A zero value takes the default.
type Config struct {
	SMTPHost     string        `mapstructure:"smtp_host"` // empty: write files to MailDir
	SMTPPort     int           `mapstructure:"smtp_port" default:"587"`
	SMTPTLS      string        `mapstructure:"smtp_tls" default:"starttls"` // none | starttls | tls
	SMTPUsername string        `mapstructure:"smtp_username"`
	SMTPPassword string        `mapstructure:"smtp_password" secret:"true"`
	SMTPFrom     string        `mapstructure:"smtp_from" default:"Nubes <noreply@nubes.local>"` // From header and envelope sender
	SMTPTimeout  time.Duration `mapstructure:"smtp_timeout" default:"30s"`                      // one SMTP conversation
	MailDir      string        `mapstructure:"mail_dir"`                                        // used when SMTPHost is empty

	MaxDeliver   int           `mapstructure:"mail_max_deliver" default:"8"`    // deliveries before dead-letter
	Backoff      time.Duration `mapstructure:"mail_backoff" default:"5s"`       // delay after the first failure, doubling
	MaxBackoff   time.Duration `mapstructure:"mail_max_backoff" default:"5m"`   // cap of that delay
	AckWait      time.Duration `mapstructure:"mail_ack_wait" default:"1m"`      // redelivery of an unacked message
	Concurrency  int           `mapstructure:"mail_concurrency" default:"4"`    // messages sent at once per replica
	ClaimTimeout time.Duration `mapstructure:"mail_claim_timeout" default:"2m"` // a send claim older than this is abandoned

	// encryption_keys, encryption_keys_file, encryption_active_key:
	// identity's keys, which seal the link or code a mail carries
	// (events.SealMail). Without them a mail carrying one is dead-lettered.
	sealcmd.Keys `mapstructure:",squash"`
}

// Defaults are the defaults of Config, as config keys: declared in its
// tags (pkg/config); withDefaults fills the same into a Config built in
// code (TestDeclaredDefaults holds the two equal).
func Defaults() map[string]any { return config.Defaults(&Config{}) }

// withDefaults fills zero fields.
func (c Config) withDefaults() Config {
	def := func(d *time.Duration, v time.Duration) {
		if *d == 0 {
			*d = v
		}
	}
	if c.SMTPPort == 0 {
		c.SMTPPort = 587
	}
	if c.SMTPTLS == "" {
		c.SMTPTLS = mailsend.TLSStartTLS
	}
	if c.SMTPFrom == "" {
		c.SMTPFrom = "Nubes <noreply@nubes.local>"
	}
	def(&c.SMTPTimeout, 30*time.Second)
	if c.MaxDeliver == 0 {
		c.MaxDeliver = 8
	}
	def(&c.Backoff, 5*time.Second)
	def(&c.MaxBackoff, 5*time.Minute)
	def(&c.AckWait, time.Minute)
	if c.Concurrency == 0 {
		c.Concurrency = 4
	}
	def(&c.ClaimTimeout, 2*time.Minute)
	return c
}

// Validate checks c (after defaults).
func (c Config) Validate() error {
	var errs []error
	bad := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }
	if c.SMTPHost == "" && c.MailDir == "" {
		bad("set smtp_host (NUBES_SMTP_HOST) to send mail, or mail_dir (NUBES_MAIL_DIR) to write it to files")
	}
	switch c.SMTPTLS {
	case mailsend.TLSNone, mailsend.TLSStartTLS, mailsend.TLSImplicit:
	default:
		bad("smtp_tls must be none, starttls or tls, not %q", c.SMTPTLS)
	}
	if c.SMTPPort <= 0 || c.SMTPPort > 65535 {
		bad("smtp_port %d out of range", c.SMTPPort)
	}
	if c.SMTPHost != "" && c.SMTPTLS == mailsend.TLSNone && c.SMTPUsername != "" && !isLocal(c.SMTPHost) {
		bad("smtp_username is set but smtp_tls is none: credentials would cross the network in clear")
	}
	if _, err := mail.ParseAddress(c.SMTPFrom); err != nil {
		bad("smtp_from %q: %v", c.SMTPFrom, err)
	}
	if c.MaxDeliver < 1 {
		bad("mail_max_deliver must be at least 1")
	}
	if c.Backoff <= 0 || c.MaxBackoff < c.Backoff {
		bad("mail_backoff must be positive and at most mail_max_backoff")
	}
	if c.AckWait <= c.SMTPTimeout {
		bad("mail_ack_wait (%s) must exceed smtp_timeout (%s)", c.AckWait, c.SMTPTimeout)
	}
	if c.ClaimTimeout <= c.SMTPTimeout {
		bad("mail_claim_timeout (%s) must exceed smtp_timeout (%s)", c.ClaimTimeout, c.SMTPTimeout)
	}
	if c.Concurrency < 1 {
		bad("mail_concurrency must be at least 1")
	}
	return errors.Join(errs...)
}

func isLocal(host string) bool {
	return host == "localhost" || host == "127.0.0.1" || host == "::1"
}

// Option adjusts the mailer beyond its configuration.
type Option func(*options)

type options struct {
	tls  *tls.Config
	keys *seal.Keyring
}

// WithKeys sets the keys that open the sealed part of mails (the
// devstack's, identity's own); otherwise they come from Config.
func WithKeys(k *seal.Keyring) Option { return func(o *options) { o.keys = k } }

// WithTLSConfig sets the TLS client configuration of the SMTP connection
// (for example a private CA in RootCAs).
func WithTLSConfig(c *tls.Config) Option { return func(o *options) { o.tls = c } }

// New returns the constructor of the mailer service: no routes, one
// worker. It needs the event bus (app.Deps.Events); it does not use the
// database.
func New(cfg Config, opts ...Option) app.Constructor {
	return func(ctx context.Context, d app.Deps) (*app.Service, error) {
		var o options
		for _, f := range opts {
			f(&o)
		}
		cfg := cfg.withDefaults()
		if err := cfg.Validate(); err != nil {
			return nil, err
		}
		if d.Events == nil {
			return nil, errors.New("mailer: needs the event bus")
		}
		from, err := mail.ParseAddress(cfg.SMTPFrom)
		if err != nil {
			return nil, err
		}
		var sender mailsend.Sender
		if cfg.SMTPHost != "" {
			sender, err = mailsend.NewSMTPSender(mailsend.SMTPConfig{
				Host: cfg.SMTPHost, Port: cfg.SMTPPort, TLS: cfg.SMTPTLS,
				Username: cfg.SMTPUsername, Password: cfg.SMTPPassword,
				Timeout: cfg.SMTPTimeout, TLSConfig: o.tls,
			})
		} else {
			sender, err = mailsend.NewDirSender(cfg.MailDir)
		}
		if err != nil {
			return nil, err
		}
		r, err := mailrender.New()
		if err != nil {
			return nil, err
		}
		log := d.Log.With("component", Name)
		log.Info("mailer configured", "sends_to", cfg.Summary(), "config", config.String(&cfg))
		if o.keys == nil && (cfg.EncryptionKeys != "" || cfg.EncryptionKeysFile != "") {
			if o.keys, err = cfg.Keyring(); err != nil {
				return nil, err
			}
		}
		if o.keys == nil {
			log.Warn("mailer: no encryption_keys: mails carrying a sealed link or code will be dead-lettered")
		}
		w := &worker{cfg: cfg, bus: d.Events, sender: sender, render: r, from: from, log: log, keys: o.keys}
		// No routes: nothing to authenticate, so the binary needs no JWK set.
		return &app.Service{Name: Name, Workers: []func(context.Context) error{w.Run}, Auth: noCredentials{}}, nil
	}
}

// noCredentials refuses every bearer credential: the mailer serves only
// /healthz, /readyz and /metrics, which need none.
type noCredentials struct{}

func (noCredentials) Authenticate(context.Context, string) (*auth.Principal, error) {
	return nil, errs.Unauthenticated("the mailer serves no API")
}

// Summary says where mail goes, for a start-up line.
func (c Config) Summary() string {
	if c.SMTPHost != "" {
		return fmt.Sprintf("smtp %s:%d (%s)", c.SMTPHost, c.SMTPPort, strings.ToLower(c.SMTPTLS))
	}
	return "files in " + c.MailDir
}
