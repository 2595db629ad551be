package core

import (
	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/nubes-io/nubes/pkg/freeform"
)

// UserChange is what update (v1, v2, profile) may change.
type UserChange struct {
	Name, Email, Language, Timezone string
	Tags                            freeform.Flat
}

func (c UserChange) Check() error {
	if err := CheckName(c.Name); err != nil {
		return err
	}
	if err := CheckEmailAddress("email", c.Email); err != nil {
		return err
	}
	return CheckLocale(c.Language, c.Timezone)
}

// fields returns the $set of c against u: a new e-mail is unverified.
func (c UserChange) Fields(u *User) bson.D {
	set := bson.D{}
	for _, f := range []struct{ k, v string }{{"name", c.Name}, {"language", c.Language}, {"timezone", c.Timezone}} {
		if f.v != "" {
			set = append(set, bson.E{Key: f.k, Value: f.v})
		}
	}
	if c.Email != "" && c.Email != u.Email {
		set = append(set, bson.E{Key: "email", Value: c.Email}, bson.E{Key: "email_verified", Value: false})
	}
	if c.Tags != nil {
		set = append(set, bson.E{Key: "tags", Value: c.Tags})
	}
	return set
}
