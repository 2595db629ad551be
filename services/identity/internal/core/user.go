package core

import (
	"context"
	"errors"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/nubes-io/nubes/pkg/auth"
	"github.com/nubes-io/nubes/pkg/errs"
	"github.com/nubes-io/nubes/pkg/events"
	"github.com/nubes-io/nubes/pkg/query"
	"github.com/nubes-io/nubes/pkg/store"
	"github.com/nubes-io/nubes/pkg/tenancy"
	"github.com/nubes-io/nubes/pkg/wire"
)

const (
	AuthLocal     = "LOCAL"
	AuthExternal  = "EXTERNAL"
	MFAEmail      = "EMAIL"
	MFAOTP        = "OTP"
	PurposeMFA    = "mfa"          // enable and disable confirmations
	PurposeEmail  = "verify_email" // e-mail address confirmation
	PurposeLogin  = "login"        // token/issue second step (token.go)
	ActionEnable  = "enable"
	ActionDisable = "disable"
)

// UserDoc is the stored user with the link state that User (model.go) does
// not carry: the jti of the latest mailed link (invite or reset) and when
// it expires.
type UserDoc struct {
	User          `bson:",inline"`
	LinkTokenID   string    `bson:"link_token_id"`
	LinkExpiresAt wire.Time `bson:"link_expires_at"`
}

// userFor loads a user of p's domain that p reaches (UserResource);
// userToChange one it may change. The _id holds the domain, so a user of
// another domain cannot even be addressed: it is not found.
func (s *Deps) UserFor(ctx context.Context, p *auth.Principal, userID string) (*User, error) {
	d, err := s.UserDocFor(ctx, p, UserResource, userID, false)
	if err != nil {
		return nil, err
	}
	return &d.User, nil
}

func (s *Deps) UserToChange(ctx context.Context, p *auth.Principal, userID string) (*User, error) {
	d, err := s.UserDocFor(ctx, p, UserResource, userID, true)
	if err != nil {
		return nil, err
	}
	return &d.User, nil
}

func (s *Deps) UserDocFor(ctx context.Context, p *auth.Principal, r query.Resource, userID string, change bool) (*UserDoc, error) {
	load := store.GetFor[UserDoc]
	if change {
		load = store.GetToChange[UserDoc]
	}
	d, err := load(ctx, s.Users, r, p, "user_id", UserKey(p.DomainID, userID))
	if errs.Is(err, errs.NotFoundCode) {
		return nil, errs.NotFound("user_id", userID)
	}
	return d, err
}

// userByKey loads a user for the flows that run before there is a caller
// (login, reset links, a new user's id): the key names the domain.
func (s *Deps) UserByKey(ctx context.Context, domainID, userID string) (*UserDoc, error) {
	d, err := store.GetLive[UserDoc](ctx, s.Users, "user_id", UserKey(domainID, userID))
	if errs.Is(err, errs.NotFoundCode) {
		return nil, errs.NotFound("user_id", userID)
	}
	return d, err
}

// updateUser applies update to u (only while cond also holds, when given)
// and returns the stored user afterwards.
func (s *Deps) UpdateUser(ctx context.Context, u *User, cond bson.D, update bson.D) (*User, error) {
	filter := append(bson.D{{Key: "_id", Value: u.ID}}, cond...)
	var out User
	err := s.Users.FindOneAndUpdate(ctx, filter, update, options.FindOneAndUpdate().SetReturnDocument(options.After)).Decode(&out)
	if errors.Is(err, mongo.ErrNoDocuments) {
		return nil, ErrUserChanged
	}
	if err != nil {
		return nil, store.Wrap(err)
	}
	return &out, nil
}

// ErrUserChanged is what updateUser answers when the user is gone or cond no
// longer holds; callers turn it into their own conflict.
var ErrUserChanged = errors.New("user changed meanwhile")

func (s *Deps) SetUser(ctx context.Context, u *User, set bson.D) (*User, error) {
	out, err := s.UpdateUser(ctx, u, nil, bson.D{{Key: "$set", Value: set}})
	if errors.Is(err, ErrUserChanged) {
		return nil, errs.NotFound("user_id", u.UserID)
	}
	return out, err
}

// UserFields are the fields of a user a query may read. password_hash,
// login_failures and the link state are not among them: a filter on them
// answers as for a field no user has (query.Resource.Unshown), a sort or
// only drops them, and a stat stage on them is 400.
var UserFields = []string{"user_id", "name", "state", "email", "email_verified", "auth_type", "user_type", "role_id",
	"role_type", "mfa", "language", "timezone", "required_actions", "tags", "domain_id", "created_at", "last_accessed_at"}

var UserKeywords = []string{"user_id", "name", "email"}

// UserResource: a user is its domain's. A domain admin (or SYSTEM)
// reaches every user of its domain; what a user does on itself goes
// through SelfResource, or names itself (v1, checked before loading).
// A user is deleted mark first (UserRecords): a marked user is left out.
var UserResource = query.Resource{KeywordFields: UserKeywords, Fields: UserFields, Secret: UserSecret, Tenancy: tenancy.InDomain.WithMarks()}

// SelfResource is the caller's own user (the kit's Owner rule on
// user_id): the profile operations reach that user and no other, whatever
// the role.
var SelfResource = query.Resource{Tenancy: tenancy.Fields{Domain: "domain_id", Owner: "user_id"}.WithMarks()}

// UserSecret are the stored fields of a user holding a credential.
var (
	UserSecret = []string{"password_hash", "otp_secret", "otp_pending"}
	AnyRole    = auth.Roles(auth.SystemAdmin, auth.DomainAdmin, auth.WorkspaceOwner, auth.WorkspaceMember, auth.User)
)

// UserRecords are the user records with their teardown (store.Teardown,
// keyed by the user's _id, UserKey): a user is deleted mark first, then
// its deletion is recorded for the other services (events.Deleted), then
// its role bindings and API keys (the user package adds its codes and
// throttle), then itself. Every create of a user's grant (a role
// binding, an API key) runs under Live, so it lands before the delete's
// children step or is removed again (404). The user's other writers
// (login, tokens, profile, MFA) $set their own fields, which keeps the
// mark.
func (s *Deps) UserRecords() store.Teardown[User] {
	return store.Teardown[User]{Records: s.Users, Resource: UserResource, Key: "user_id",
		Children: func(ctx context.Context, u *User) error {
			// The other services' share first (events.Deleted, through the
			// outbox): once the delete answers, it is on its way.
			if err := s.Outbox.AddDeleted(ctx, events.Deleted{ID: events.DeletedID(events.DeletedUser, u.DomainID, u.UserID, wire.FormatTime(u.CreatedAt.Time)),
				Kind: events.DeletedUser, DomainID: u.DomainID, UserID: u.UserID}); err != nil {
				return store.Wrap(err)
			}
			mine := bson.D{{Key: "domain_id", Value: u.DomainID}, {Key: "user_id", Value: u.UserID}}
			for _, c := range []*mongo.Collection{s.Bindings, s.APIKeys} {
				if err := store.DeleteChildren(ctx, c, mine); err != nil {
					return err
				}
			}
			return nil
		},
	}
}
