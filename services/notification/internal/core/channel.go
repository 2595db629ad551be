package core

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/nubes-io/nubes/pkg/freeform"
	"github.com/nubes-io/nubes/pkg/seal"
	"github.com/nubes-io/nubes/pkg/wire"
)

// Channel collections and id prefixes (upstream's).
const (
	ProjectChannelsCollection = "notification_project_channels"
	UserChannelsCollection    = "notification_user_channels"
	// InboxCollection holds users' in-app notifications (upstream's
	// Notification of a user), _id = "<request id>-<user id>" hashed.
	InboxCollection = "notification_inbox"
	// RequestsCollection records each notification request given up on
	// (_id = the request's ID, outcome DEAD): what an operator counts and
	// replays besides the dead letter on events.NotificationDeadSubject.
	RequestsCollection = "notification_requests"

	ProjectChannelPrefix = "project-ch"
	UserChannelPrefix    = "user-ch"
)

// Days are the schedule's days, upstream's names.
var Days = []string{"MON", "TUE", "WED", "THU", "FRI", "SAT", "SUN"}

// Levels a channel takes: upstream's LV1..LV5 and the LV6..LV10 of the
// spec's escalation rules (docs/decisions.md).
var Levels = []string{"LV1", "LV2", "LV3", "LV4", "LV5", "LV6", "LV7", "LV8", "LV9", "LV10"}

// Schedule is a channel's delivery window: the days and the UTC hours
// [start_hour, end_hour), wrapping past midnight when start > end.
type Schedule struct {
	DayOfWeek []string `bson:"day_of_week" json:"day_of_week"`
	StartHour int      `bson:"start_hour" json:"start_hour"`
	EndHour   int      `bson:"end_hour" json:"end_hour"`
}

// Check: days known and given, start 0..24, end 1..25, start != end
// (upstream's bounds).
func (s *Schedule) Check() error {
	if len(s.DayOfWeek) == 0 {
		return fmt.Errorf("schedule.day_of_week is required")
	}
	for _, d := range s.DayOfWeek {
		if !slices.Contains(Days, d) {
			return fmt.Errorf("schedule.day_of_week: %q is not one of %s", d, strings.Join(Days, ", "))
		}
	}
	switch {
	case s.StartHour < 0 || s.StartHour > 24:
		return fmt.Errorf("schedule.start_hour must be 0..24")
	case s.EndHour < 1 || s.EndHour > 25:
		return fmt.Errorf("schedule.end_hour must be 1..25")
	case s.StartHour == s.EndHour:
		return fmt.Errorf("schedule.start_hour and end_hour must differ")
	}
	return nil
}

// Open reports whether t (UTC) is inside the window, as upstream's
// lib/schedule: the weekday of t is listed and its hour is in [start,
// end), or, when start > end, in [start, 24) or [0, end).
func (s *Schedule) Open(t time.Time) bool {
	t = t.UTC()
	day := Days[(int(t.Weekday())+6)%7]
	if !slices.Contains(s.DayOfWeek, day) {
		return false
	}
	h := t.Hour()
	if s.StartHour < s.EndHour {
		return s.StartHour <= h && h < s.EndHour
	}
	return h >= s.StartHour || h < s.EndHour
}

// ProjectChannel is a project's channel as stored and sent. A SECRET
// protocol's data is sealed in Sealed (bound to the channel) and Data is
// {}; SecretID then names it.
type ProjectChannel struct {
	ID                string        `bson:"_id" json:"-"`
	ProjectChannelID  string        `bson:"project_channel_id" json:"project_channel_id"`
	Name              string        `bson:"name" json:"name"`
	State             string        `bson:"state" json:"state"`
	Data              freeform.Map  `bson:"data" json:"data"`
	IsSubscribe       bool          `bson:"is_subscribe" json:"is_subscribe"`
	Subscriptions     []string      `bson:"subscriptions" json:"subscriptions"`
	NotificationLevel string        `bson:"notification_level" json:"notification_level"`
	IsScheduled       bool          `bson:"is_scheduled" json:"is_scheduled"`
	Schedule          *Schedule     `bson:"schedule" json:"schedule"`
	Tags              freeform.Flat `bson:"tags" json:"tags"`
	ProtocolID        string        `bson:"protocol_id" json:"protocol_id"`
	SecretID          string        `bson:"secret_id" json:"secret_id"`
	Sealed            *seal.Sealed  `bson:"sealed,omitempty" json:"-"`
	ProjectID         string        `bson:"project_id" json:"project_id"`
	WorkspaceID       string        `bson:"workspace_id" json:"workspace_id"`
	DomainID          string        `bson:"domain_id" json:"domain_id"`
	CreatedAt         wire.Time     `bson:"created_at" json:"created_at"`
}

// UserChannel is a user's own channel as stored and sent (no level:
// upstream checks none for users).
type UserChannel struct {
	ID            string        `bson:"_id" json:"-"`
	UserChannelID string        `bson:"user_channel_id" json:"user_channel_id"`
	Name          string        `bson:"name" json:"name"`
	State         string        `bson:"state" json:"state"`
	Data          freeform.Map  `bson:"data" json:"data"`
	IsSubscribe   bool          `bson:"is_subscribe" json:"is_subscribe"`
	Subscriptions []string      `bson:"subscriptions" json:"subscriptions"`
	IsScheduled   bool          `bson:"is_scheduled" json:"is_scheduled"`
	Schedule      *Schedule     `bson:"schedule" json:"schedule"`
	Tags          freeform.Flat `bson:"tags" json:"tags"`
	ProtocolID    string        `bson:"protocol_id" json:"protocol_id"`
	UserSecretID  string        `bson:"user_secret_id" json:"user_secret_id"`
	Sealed        *seal.Sealed  `bson:"sealed,omitempty" json:"-"`
	UserID        string        `bson:"user_id" json:"user_id"`
	DomainID      string        `bson:"domain_id" json:"domain_id"`
	CreatedAt     wire.Time     `bson:"created_at" json:"created_at"`
}

// Inbox is a user's in-app notification (upstream's Notification of a
// user), stored once per request and user.
type Inbox struct {
	ID                string       `bson:"_id" json:"-"`
	NotificationID    string       `bson:"notification_id" json:"notification_id"`
	Topic             string       `bson:"topic" json:"topic"`
	Message           freeform.Map `bson:"message" json:"message"`
	NotificationType  string       `bson:"notification_type" json:"notification_type"`
	NotificationLevel string       `bson:"notification_level" json:"notification_level"`
	IsRead            bool         `bson:"is_read" json:"is_read"`
	UserID            string       `bson:"user_id" json:"user_id"`
	DomainID          string       `bson:"domain_id" json:"domain_id"`
	CreatedAt         wire.Time    `bson:"created_at" json:"created_at"`
}

// ChannelAD binds a channel's sealed data to its record (its collection
// follows from the id's prefix).
func ChannelAD(channelID, domainID string) []byte {
	coll := ProjectChannelsCollection
	if strings.HasPrefix(channelID, UserChannelPrefix+"-") {
		coll = UserChannelsCollection
	}
	return seal.AD(coll, channelID, domainID)
}

// Picks reports whether a channel takes a notification of topic at t:
// ENABLED, subscribed to the topic (or to everything), inside its
// schedule (or unscheduled). Levels are the caller's (project only).
func Picks(state string, isSubscribe bool, subscriptions []string, isScheduled bool, s *Schedule, topic string, t time.Time) bool {
	if state != Enabled {
		return false
	}
	if isSubscribe && !slices.Contains(subscriptions, topic) {
		return false
	}
	return !isScheduled || s == nil || s.Open(t)
}

// DataType is a protocol's init metadata data_type: SECRET protocols
// keep channel data sealed.
func DataType(pr *Protocol) string {
	t, _ := pr.PluginInfo.Metadata["data_type"].(string)
	if t == "" {
		return "PLAIN_TEXT"
	}
	return t
}

// DataSchema is the protocol's schema of channel data (metadata
// data.schema), nil when it declares none.
func DataSchema(pr *Protocol) any {
	d, _ := pr.PluginInfo.Metadata["data"].(map[string]any)
	if d == nil {
		return nil
	}
	return d["schema"]
}
