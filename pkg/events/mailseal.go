package events

import (
	"errors"
	"maps"
	"slices"

	"github.com/nubes-io/nubes/pkg/seal"
	"github.com/nubes-io/nubes/pkg/wire"
)

// SecretMailKeys are the Data keys of a mail that act for its recipient
// (a link carrying a token, a code, a temporary password): they never
// travel or rest in clear (outbox, MailStream, MailDeadStream). SealMail
// moves them into Mail.Secret; the mailer opens them at send time.
var SecretMailKeys = []string{"link", "code", "token", "temporary_password", "callback_url"}

// mailAD binds a mail's sealed secret to the mail: copied onto another
// mail, it does not open.
func mailAD(id string) []byte { return seal.AD("mail", id) }

// SealMail moves m's secret Data keys into m.Secret, sealed with k and
// bound to m.ID (set here when empty). TokenID, when empty, becomes the
// mail id: what logs and support name instead of the secret.
func SealMail(k *seal.Keyring, m *Mail) error {
	if k == nil {
		return errors.New("events: no keys to seal a mail")
	}
	if m.ID == "" {
		m.ID = wire.NewID("mail")
	}
	if m.TokenID == "" {
		m.TokenID = m.ID
	}
	secret := map[string]string{}
	data := maps.Clone(m.Data)
	for _, key := range SecretMailKeys {
		if v, ok := data[key]; ok {
			secret[key] = v
			delete(data, key)
		}
	}
	if len(secret) == 0 {
		return nil
	}
	s, err := k.SealJSON(secret, mailAD(m.ID))
	if err != nil {
		return err
	}
	m.Data, m.Secret = data, &s
	return nil
}

// OpenMail returns m with its sealed secret back in Data (m is left as it
// is, so what is dead-lettered stays sealed).
func OpenMail(k *seal.Keyring, m Mail) (Mail, error) {
	if m.Secret == nil {
		return m, nil
	}
	if k == nil {
		return m, errors.New("the mail carries a sealed secret and the mailer has no encryption keys (encryption_keys)")
	}
	var secret map[string]string
	if err := k.OpenJSON(*m.Secret, mailAD(m.ID), &secret); err != nil {
		return m, err
	}
	data := maps.Clone(m.Data)
	if data == nil {
		data = map[string]string{}
	}
	for _, key := range slices.Sorted(maps.Keys(secret)) {
		if slices.Contains(SecretMailKeys, key) {
			data[key] = secret[key]
		}
	}
	m.Data, m.Secret = data, nil
	return m, nil
}
