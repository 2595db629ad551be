package events

import (
	"context"
	"errors"
	"fmt"
	"regexp"
)

// levelPattern is a request's level: ALL or LV1..LV10.
var levelPattern = regexp.MustCompile(`^(ALL|LV([1-9]|10))$`)

// Check reports what makes r unusable: the contract, not a business rule
// (the notification service dead-letters a request that fails it).
func (r NotificationRequest) Check() error {
	var errs []error
	if !ValidID(r.ID) {
		errs = append(errs, fmt.Errorf("id %q is not a valid event id", r.ID))
	}
	if r.DomainID == "" {
		errs = append(errs, errors.New("no domain_id"))
	}
	if r.ProjectID == "" && len(r.UserIDs) == 0 && !r.DomainAdmins {
		errs = append(errs, errors.New("no target: project_id, user_ids or domain_admins"))
	}
	if r.Topic == "" {
		errs = append(errs, errors.New("no topic"))
	}
	switch r.NotificationType {
	case "", NotifyInfo, NotifyError, NotifySuccess, NotifyWarning:
	default:
		errs = append(errs, fmt.Errorf("notification_type %q is not INFO, ERROR, SUCCESS or WARNING", r.NotificationType))
	}
	if r.Level != "" && !levelPattern.MatchString(r.Level) {
		errs = append(errs, fmt.Errorf("notification_level %q is not ALL or LV1..LV10", r.Level))
	}
	if r.Message.Title == "" {
		errs = append(errs, errors.New("no message.title"))
	}
	return errors.Join(errs...)
}

// Notify sends a notification request through the outbox: the one way a
// service asks for a notification (published on
// NotificationRequestSubject with r.ID as Nats-Msg-Id, at once when the
// bus takes it, else by the relay: Publish). An unusable request is
// refused here, before anything is sent. A second Notify with the same
// ID is a no-op downstream; pick IDs that do not collide with the
// outbox's other events (mail ids start with "mail-").
func (o *Outbox) Notify(ctx context.Context, r NotificationRequest) error {
	if err := r.Check(); err != nil {
		return fmt.Errorf("notification request: %w", err)
	}
	return o.Publish(ctx, NotificationRequestSubject, r.ID, r)
}
