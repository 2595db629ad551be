// Package mailsend builds RFC 5322 messages and hands them over: to an
// SMTP server (SMTPSender) or to a directory of .eml files (DirSender, the
// devstack's default). A Sender returns nil only once the message is
// accepted: the SMTP server answered 250 to the end of DATA, or the file is
// written, synced and in place.
package mailsend

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"mime"
	"mime/quotedprintable"
	"net/mail"
	"strings"
	"time"
)

// Sender delivers one message.
type Sender interface {
	Send(ctx context.Context, m *Message) error
}

// Message is a message ready to send.
type Message struct {
	ID   string // the mail id: Message-ID is <ID@domain of From>, the file name <ID>.eml
	From string // envelope sender
	To   string // envelope recipient
	Raw  []byte // RFC 5322, CRLF line ends
}

// Letter is what Build turns into a Message.
type Letter struct {
	ID       string
	From     *mail.Address
	To       *mail.Address
	Date     time.Time
	Subject  string
	Body     string // text, LF or CRLF line ends
	Language string // Content-Language
	Template string // X-Nubes-Template
}

// Build renders l as an RFC 5322 message: UTF-8 text in
// quoted-printable, the subject and display names encoded as RFC 2047
// words when they are not plain ASCII.
func Build(l Letter) (*Message, error) {
	if l.ID == "" || strings.ContainsAny(l.ID, "<>@ \r\n") {
		return nil, fmt.Errorf("bad message id %q", l.ID)
	}
	if l.From == nil || l.To == nil {
		return nil, errors.New("from and to are required")
	}
	if strings.ContainsAny(l.Subject, "\r\n") || strings.ContainsAny(l.Template, "\r\n") || strings.ContainsAny(l.Language, "\r\n") {
		return nil, errors.New("line break in a header")
	}
	domain := "nubes.local"
	if _, d, ok := strings.Cut(l.From.Address, "@"); ok && d != "" {
		domain = d
	}
	var b bytes.Buffer
	h := func(k, v string) { b.WriteString(k + ": " + v + "\r\n") }
	h("From", l.From.String())
	h("To", l.To.String())
	// Adjacent encoded words may be folded apart: each line stays short.
	h("Subject", strings.ReplaceAll(mime.QEncoding.Encode("UTF-8", l.Subject), "?= =?", "?=\r\n =?"))
	h("Date", l.Date.UTC().Format(time.RFC1123Z))
	h("Message-ID", "<"+l.ID+"@"+domain+">")
	h("MIME-Version", "1.0")
	h("Content-Type", "text/plain; charset=UTF-8")
	h("Content-Transfer-Encoding", "quoted-printable")
	if l.Language != "" {
		h("Content-Language", l.Language)
	}
	h("Auto-Submitted", "auto-generated")
	if l.Template != "" {
		h("X-Nubes-Template", l.Template)
	}
	b.WriteString("\r\n")
	qp := quotedprintable.NewWriter(&b)
	body := strings.ReplaceAll(l.Body, "\r\n", "\n")
	if _, err := qp.Write([]byte(strings.ReplaceAll(body, "\n", "\r\n"))); err != nil {
		return nil, err
	}
	if err := qp.Close(); err != nil {
		return nil, err
	}
	if !bytes.HasSuffix(b.Bytes(), []byte("\r\n")) {
		b.WriteString("\r\n")
	}
	return &Message{ID: l.ID, From: l.From.Address, To: l.To.Address, Raw: b.Bytes()}, nil
}

// PermanentError marks a refusal that retrying will not change (the
// server refused the recipient or the content with a 5xx).
type PermanentError struct{ Err error }

func (e *PermanentError) Error() string { return "permanent: " + e.Err.Error() }
func (e *PermanentError) Unwrap() error { return e.Err }

// IsPermanent reports whether err is a PermanentError.
func IsPermanent(err error) bool {
	var p *PermanentError
	return errors.As(err, &p)
}
