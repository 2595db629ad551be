package core

import (
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
)

// NewEpoch is a session epoch no earlier one equals.
func NewEpoch() int64 { return time.Now().UnixNano() }

// EndSessions is the $set field that ends every session of a user.
func EndSessions() bson.E { return bson.E{Key: "session_epoch", Value: NewEpoch()} }
