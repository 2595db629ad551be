package events

// Dead letters kept as records.
//
// A consumer that has a database keeps the messages it gave up on in a
// collection of its own (<service>_dead_letters, declared by the
// service), one document per message: an operator lists them with the
// database's tools and replays one by publishing its data again on its
// subject (docs/operations.md, "Dead letters").

import (
	"context"
	"fmt"
	"time"

	"go.mongodb.org/mongo-driver/v2/mongo"
)

// DeadRecord is a message given up on, as DeadRecords stores it.
type DeadRecord struct {
	// ID is "<consumer>:<stream>:<stream sequence>": one record per
	// message, however often its dead letter is written.
	ID         string    `bson:"_id"`
	Stream     string    `bson:"stream"`
	Consumer   string    `bson:"consumer"`
	Subject    string    `bson:"subject"`
	MsgID      string    `bson:"msg_id"` // its Nats-Msg-Id
	StreamSeq  uint64    `bson:"stream_seq"`
	Deliveries int       `bson:"deliveries"`
	Reason     string    `bson:"reason"`
	Data       string    `bson:"data"` // the payload as received
	Published  time.Time `bson:"published_at"`
	FailedAt   time.Time `bson:"failed_at"`
}

// DeadRecords keeps dead letters as DeadRecord documents in c.
func DeadRecords(c *mongo.Collection) DeadLetter {
	return func(ctx context.Context, d Dead) error {
		rec := DeadRecord{ID: fmt.Sprintf("%s:%s:%d", d.Consumer, d.Stream, d.StreamSeq), Stream: d.Stream, Consumer: d.Consumer,
			Subject: d.Subject, MsgID: d.MsgID, StreamSeq: d.StreamSeq, Deliveries: d.Attempt, Reason: d.Reason,
			Data: string(d.Data), Published: d.Published.UTC(), FailedAt: time.Now().UTC()}
		_, err := c.InsertOne(ctx, rec)
		if mongo.IsDuplicateKeyError(err) {
			return nil // kept by an earlier try whose terminate was lost
		}
		return err
	}
}
