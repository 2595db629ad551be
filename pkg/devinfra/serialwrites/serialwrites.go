// Package serialwrites is a MongoDB wire-protocol proxy that makes
// FerretDB 1.24 keep MongoDB's single-document promise.
//
// FerretDB applies $inc, conditional updates, upserts and findAndModify
// as a read followed by a whole-document write, so two such writes that
// overlap lose one of them. The proxy sits in front of FerretDB and lets
// one write command at a time into a collection (or a database, on
// SQLite): an insert, update, delete or findAndModify holds its
// collection's turn from the moment the request is forwarded until its
// answer is back. A command that changes one database's collections or
// indexes (create, createIndexes, drop, dropIndexes, dropDatabase,
// collMod) holds every turn of that database only: FerretDB keeps each
// database apart (one SQLite file each), so another database's writes
// need not wait for it, as a test run's many databases, each built by a
// test's setup, would. Any other command that writes (an aggregate with
// $out or $merge, a command on admin, or one this package does not know)
// holds every turn of the store. Reads are not held, as on MongoDB.
//
// Every client of the store goes through one proxy (the devstack's
// services, a test's replicas, the e2e suite's containers), so the order
// holds across all of them. It is for the embedded development store
// only: production runs MongoDB, which needs none of this, and Nubes'
// code must not rely on more than MongoDB promises for one document.
//
// The e2e suite's FerretDB binary (deploy/ferretdb, a module of its own)
// uses it too. It also narrows conditional writes to FerretDB's _id
// index (narrow.go).
package serialwrites

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"net"
	"strings"
	"sync"

	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
)

// Wire protocol opcodes and flags (MongoDB's OP_MSG specification).
const (
	opQuery      = 2004 // legacy: drivers still open a connection with a hello in one
	opMsg        = 2013
	moreToCome   = 1 << 1
	checksum     = 1 << 0
	maxMessage   = 48 << 20 // MongoDB's maxMessageSizeBytes
	headerLength = 16
)

// collectionWrites name the commands that write to the one collection
// named by their first value: they hold that collection's turn only.
var collectionWrites = map[string]bool{
	"insert": true, "update": true, "delete": true, "findAndModify": true, "findandmodify": true,
}

// databaseWrites change the collections or indexes of the database named
// by their $db only: they hold that database's turns.
var databaseWrites = map[string]bool{
	"create": true, "createIndexes": true, "drop": true, "dropIndexes": true, "deleteIndexes": true,
	"dropDatabase": true, "collMod": true,
}

// reads never change data (or change only the connection's state); every
// command absent from both lists is taken to write anywhere.
var reads = map[string]bool{
	"find": true, "getMore": true, "count": true, "distinct": true, "listCollections": true,
	"listIndexes": true, "listDatabases": true, "hello": true, "isMaster": true, "ismaster": true,
	"ping": true, "buildInfo": true, "buildinfo": true, "getParameter": true, "getLog": true,
	"hostInfo": true, "serverStatus": true, "dbStats": true, "collStats": true, "dataSize": true,
	"connectionStatus": true, "whatsmyuri": true, "killCursors": true, "explain": true,
	"getCmdLineOpts": true, "getFreeMonitoringStatus": true, "saslStart": true,
	"saslContinue": true, "endSessions": true, "validate": true, "currentOp": true,
	"listCommands": true, "logout": true, "authenticate": true, "aggregate": true,
}

// Proxy forwards connections on a listener to a FerretDB address,
// ordering write commands as the package doc says.
type Proxy struct {
	backend  string
	ln       net.Listener
	narrower *narrower
	opts     Options
	all      sync.RWMutex // a write outside one database holds it alone
	turns    [64]sync.Mutex

	mu    sync.Mutex
	dbs   map[string]*sync.RWMutex // a write to a database's schema holds its own alone
	conns map[net.Conn]struct{}
	wg    sync.WaitGroup
}

// Options tune a Proxy.
type Options struct {
	// PerDatabase gives a write its database's turn rather than its
	// collection's: SQLite has one writer per database file, and writers
	// queued at SQLite wait in its busy handler's sleeps (up to 100 ms
	// each), where a turn of the proxy hands over at once.
	PerDatabase bool
}

// Listen serves on addr ("127.0.0.1:0" picks a port), forwarding to
// backend, until Close.
func Listen(addr, backend string, o Options) (*Proxy, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, err
	}
	client, err := mongo.Connect(options.Client().ApplyURI("mongodb://" + backend + "/").SetMaxPoolSize(64))
	if err != nil {
		_ = ln.Close()
		return nil, err
	}
	p := &Proxy{backend: backend, ln: ln, opts: o, conns: map[net.Conn]struct{}{}, dbs: map[string]*sync.RWMutex{}, narrower: &narrower{client: client}}
	p.wg.Add(1)
	go p.accept()
	return p, nil
}

// Exclusive runs fn holding every turn of database db, as a write to its
// schema: for a writer of the store that does not go through the proxy
// (devinfra's _id indexer writes a database's SQLite file itself).
func (p *Proxy) Exclusive(db string, fn func() error) error {
	release := p.holdDatabase(db)
	defer release()
	return fn()
}

// database is db's lock: read-held by its collections' writes, held
// alone by a write to its schema.
func (p *Proxy) database(db string) *sync.RWMutex {
	p.mu.Lock()
	defer p.mu.Unlock()
	l := p.dbs[db]
	if l == nil {
		l = &sync.RWMutex{}
		p.dbs[db] = l
	}
	return l
}

func (p *Proxy) holdDatabase(db string) func() {
	p.all.RLock()
	l := p.database(db)
	l.Lock()
	return func() { l.Unlock(); p.all.RUnlock() }
}

// Addr is where the proxy listens.
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

// Close stops listening, cuts every connection and waits for them.
func (p *Proxy) Close() error {
	err := p.ln.Close()
	p.mu.Lock()
	for c := range p.conns {
		_ = c.Close()
	}
	p.mu.Unlock()
	p.wg.Wait()
	_ = p.narrower.client.Disconnect(context.Background())
	return err
}

func (p *Proxy) accept() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		b, err := net.Dial("tcp", p.backend)
		if err != nil {
			_ = c.Close()
			continue
		}
		if !p.track(c, b) {
			return
		}
		p.wg.Add(1)
		go func() {
			defer p.wg.Done()
			defer p.untrack(c, b)
			_ = p.serve(c, b)
		}()
	}
}

func (p *Proxy) track(cs ...net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.conns == nil {
		return false
	}
	for _, c := range cs {
		p.conns[c] = struct{}{}
	}
	return true
}

func (p *Proxy) untrack(cs ...net.Conn) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range cs {
		_ = c.Close()
		delete(p.conns, c)
	}
}

// serve relays one client connection. A driver sends one request on a
// connection and waits for its answer before the next (no pipelining),
// so the relay is a loop of request, answer; an answer flagged
// moreToCome (an exhaust cursor) is followed by more answers.
func (p *Proxy) serve(client, backend net.Conn) error {
	for {
		req, err := readMessage(client)
		if err != nil {
			return err
		}
		unlock, narrow := p.order(req)
		if narrow {
			req = p.narrower.narrow(req)
		}
		err = p.roundTrip(req, client, backend)
		unlock()
		if err != nil {
			return err
		}
	}
}

func (p *Proxy) roundTrip(req []byte, client, backend net.Conn) error {
	if _, err := backend.Write(req); err != nil {
		return err
	}
	if flags(req)&moreToCome != 0 {
		return nil // the sender asked for no answer
	}
	for {
		resp, err := readMessage(backend)
		if err != nil {
			return err
		}
		if _, err := client.Write(resp); err != nil {
			return err
		}
		if flags(resp)&moreToCome == 0 {
			return nil
		}
	}
}

// scope is how much of the store a request must have to itself.
type scope int

const (
	unordered     scope = iota // a read
	oneCollection              // a write to the collection named by key
	oneDatabase                // a write to the schema of the database named by key
	everything                 // any other write
)

// scopeOf gives a request's scope, the key of its turn, and the database
// it writes in (for oneCollection and oneDatabase).
func scopeOf(req []byte, perDatabase bool) (s scope, key, db string) {
	name, db, coll := command(req)
	switch {
	case legacyHandshake(req):
		return unordered, "", ""
	case reads[name] && !(name == "aggregate" && writingPipeline(req)):
		return unordered, "", ""
	case collectionWrites[name] && coll != "" && db != "" && perDatabase:
		return oneCollection, db, db
	case collectionWrites[name] && coll != "" && db != "":
		return oneCollection, db + "." + coll, db
	case databaseWrites[name] && db != "" && db != "admin":
		return oneDatabase, db, db
	default:
		return everything, "", ""
	}
}

// order takes the turn req needs and returns its release; narrow says
// the write holds its collection's turn, so it may be narrowed.
func (p *Proxy) order(req []byte) (release func(), narrow bool) {
	switch s, key, db := scopeOf(req, p.opts.PerDatabase); s {
	case unordered:
		return func() {}, false
	case oneCollection:
		p.all.RLock()
		l := p.database(db)
		l.RLock()
		t := &p.turns[slot(key)]
		t.Lock()
		return func() { t.Unlock(); l.RUnlock(); p.all.RUnlock() }, true
	case oneDatabase:
		return p.holdDatabase(db), false
	default:
		p.all.Lock()
		return p.all.Unlock, false
	}
}

func slot(key string) int {
	h := fnv.New32a()
	_, _ = h.Write([]byte(key))
	return int(h.Sum32() % 64)
}

func readMessage(r io.Reader) ([]byte, error) {
	var h [headerLength]byte
	if _, err := io.ReadFull(r, h[:]); err != nil {
		return nil, err
	}
	n := int(binary.LittleEndian.Uint32(h[:4]))
	if n < headerLength || n > maxMessage {
		return nil, fmt.Errorf("serialwrites: message of %d bytes", n)
	}
	msg := make([]byte, n)
	copy(msg, h[:])
	if _, err := io.ReadFull(r, msg[headerLength:]); err != nil {
		return nil, err
	}
	return msg, nil
}

func opCode(msg []byte) uint32 { return binary.LittleEndian.Uint32(msg[12:16]) }

func flags(msg []byte) uint32 {
	if opCode(msg) != opMsg || len(msg) < headerLength+4 {
		return 0
	}
	return binary.LittleEndian.Uint32(msg[16:20])
}

// body is the OP_MSG's kind-0 section: the command document.
func body(msg []byte) []byte {
	if opCode(msg) != opMsg || len(msg) < headerLength+5 {
		return nil
	}
	end := len(msg)
	if flags(msg)&checksum != 0 {
		end -= 4
	}
	for i := headerLength + 4; i < end; {
		kind := msg[i]
		i++
		if i+4 > end {
			return nil
		}
		n := int(binary.LittleEndian.Uint32(msg[i:]))
		if n < 5 || i+n > end {
			return nil
		}
		if kind == 0 {
			return msg[i : i+n]
		}
		i += n // a kind-1 section's size counts itself too
	}
	return nil
}

// command reads the command's name (its first key), its $db and the
// collection named by a string first value; an OP_MSG it cannot read,
// or another opcode, gives no name, which orders as a write anywhere.
func command(msg []byte) (name, db, coll string) {
	doc := body(msg)
	if doc == nil {
		return "", "", ""
	}
	first := true
	_ = walk(doc, func(key string, typ byte, val []byte) bool {
		if first {
			name = key
			if typ == 0x02 {
				coll = bsonString(val)
			}
			first = false
		}
		if key == "$db" && typ == 0x02 {
			db = bsonString(val)
		}
		return true
	})
	return name, db, coll
}

// legacyHandshake tells whether msg is an OP_QUERY hello (or isMaster)
// on a $cmd collection, the one OP_QUERY servers still take: a driver
// opens each connection with it. Taken for a write anywhere, it waited
// for every write in flight, and a client whose new connection opened
// while another of its requests waited for a turn could wait for itself.
func legacyHandshake(msg []byte) bool {
	if opCode(msg) != opQuery || len(msg) < headerLength+4 {
		return false
	}
	rest := msg[headerLength+4:] // after the flags
	end := bytes.IndexByte(rest, 0)
	if end < 0 || !strings.HasSuffix(string(rest[:end]), ".$cmd") || len(rest) < end+1+8 {
		return false
	}
	doc := rest[end+1+8:] // after numberToSkip and numberToReturn
	if len(doc) < 5 || int(binary.LittleEndian.Uint32(doc)) > len(doc) {
		return false
	}
	first := ""
	_ = walk(doc[:binary.LittleEndian.Uint32(doc)], func(key string, _ byte, _ []byte) bool {
		first = key
		return false
	})
	return first == "hello" || first == "isMaster" || first == "ismaster"
}

// writingPipeline tells whether an aggregate's pipeline ends in $out or
// $merge, the stages that write.
func writingPipeline(msg []byte) bool {
	doc := body(msg)
	writes := false
	_ = walk(doc, func(key string, typ byte, val []byte) bool {
		if key != "pipeline" || typ != 0x04 {
			return true
		}
		_ = walk(val, func(_ string, typ byte, stage []byte) bool {
			if typ == 0x03 {
				_ = walk(stage, func(op string, _ byte, _ []byte) bool {
					writes = writes || op == "$out" || op == "$merge"
					return false
				})
			}
			return !writes
		})
		return false
	})
	return writes || doc == nil
}

func bsonString(val []byte) string {
	if len(val) < 5 {
		return ""
	}
	return string(val[4 : len(val)-1])
}

var errBSON = errors.New("serialwrites: malformed BSON")

// walk calls fn with each top-level element of the BSON document doc
// until fn returns false.
func walk(doc []byte, fn func(key string, typ byte, val []byte) bool) error {
	if len(doc) < 5 {
		return errBSON
	}
	for i := 4; i < len(doc)-1; {
		typ := doc[i]
		i++
		k := i
		for k < len(doc) && doc[k] != 0 {
			k++
		}
		if k >= len(doc) {
			return errBSON
		}
		key := string(doc[i:k])
		i = k + 1
		n, err := valueSize(typ, doc[i:])
		if err != nil {
			return err
		}
		if !fn(key, typ, doc[i:i+n]) {
			return nil
		}
		i += n
	}
	return nil
}

// fixedSizes are the lengths of the BSON types of one size.
var fixedSizes = map[byte]int{0x01: 8, 0x06: 0, 0x07: 12, 0x08: 1, 0x09: 8, 0x0A: 0, 0x10: 4, 0x11: 8, 0x12: 8, 0x13: 16, 0xFF: 0, 0x7F: 0}

// valueSize is the length of a BSON value of type typ at the start of b.
func valueSize(typ byte, b []byte) (int, error) {
	n, ok := fixedSizes[typ]
	switch {
	case ok:
	case typ == 0x02 || typ == 0x0D || typ == 0x0E: // string, code, symbol
		n = 4
		if len(b) >= 4 {
			n += int(binary.LittleEndian.Uint32(b))
		}
	case typ == 0x03 || typ == 0x04 || typ == 0x0F: // document, array, code with scope
		if len(b) >= 4 {
			n = int(binary.LittleEndian.Uint32(b))
		}
	case typ == 0x05: // binary
		n = 5
		if len(b) >= 4 {
			n += int(binary.LittleEndian.Uint32(b))
		}
	case typ == 0x0C: // DBPointer
		n = 4 + 12
		if len(b) >= 4 {
			n += int(binary.LittleEndian.Uint32(b))
		}
	case typ == 0x0B: // regex: two cstrings
		z := 0
		for n = 0; n < len(b) && z < 2; n++ {
			if b[n] == 0 {
				z++
			}
		}
		if z < 2 {
			return 0, errBSON
		}
	default:
		return 0, errBSON
	}
	if n < 0 || n > len(b) {
		return 0, errBSON
	}
	return n, nil
}
