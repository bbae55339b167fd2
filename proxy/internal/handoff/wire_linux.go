package handoff

import (
	"errors"
	"fmt"
	"io"
	"net"

	"golang.org/x/sys/unix"
)

// Answers of the receiver, one byte per message.
const (
	AckRefused = 0 // the record was refused; its descriptors are closed
	AckAdopted = 1 // the receiver holds the descriptors and resumes
)

// FDs is the number of descriptors a message carries: the client's
// socket, then the backend's.
const FDs = 2

// maxFDs bounds what one read accepts; more is a broken sender, and
// every descriptor received is closed.
const maxFDs = 8

// Send writes one message, msg from Encode, with the client's and the
// backend's descriptors attached (SCM_RIGHTS). c must be a SOCK_STREAM
// Unix socket.
func Send(c *net.UnixConn, msg []byte, clientFD, backendFD int) error {
	n, oobn, err := c.WriteMsgUnix(msg, unix.UnixRights(clientFD, backendFD), nil)
	if err != nil {
		return fmt.Errorf("handoff: send: %w", err)
	}
	if n != len(msg) || oobn == 0 {
		return fmt.Errorf("handoff: send: %d of %d bytes", n, len(msg))
	}
	return nil
}

// Message is one received message: its bytes (header and body) and the
// descriptors that came with it, which the caller owns.
type Message struct {
	Bytes []byte
	FDs   []int
}

// Close closes every descriptor of m.
func (m *Message) Close() {
	for _, fd := range m.FDs {
		unix.Close(fd)
	}
	m.FDs = nil
}

// Receive reads one message. The header is read on its own, so the
// descriptors (attached to the message's first byte) come with it and a
// read never takes bytes of the next message. io.EOF: the sender is done.
// Any other error means the stream is lost; the descriptors received are
// closed then. A message whose body is complete but whose descriptors
// are not FDs is returned as is: Decode and the caller refuse it.
func Receive(c *net.UnixConn) (Message, error) {
	var m Message
	hdr := make([]byte, HeaderSize)
	oob := make([]byte, unix.CmsgSpace(maxFDs*4))
	got := 0
	for got < HeaderSize {
		n, oobn, _, _, err := c.ReadMsgUnix(hdr[got:], oob)
		if oobn > 0 {
			fds, perr := parseRights(oob[:oobn])
			m.FDs = append(m.FDs, fds...)
			if perr != nil {
				m.Close()
				return Message{}, perr
			}
		}
		got += n
		if err != nil {
			m.Close()
			if errors.Is(err, io.EOF) && got == 0 {
				return Message{}, io.EOF
			}
			return Message{}, fmt.Errorf("handoff: receive: %w", err)
		}
	}
	h, err := ParseHeader(hdr)
	if err != nil {
		m.Close()
		return Message{}, err
	}
	m.Bytes = make([]byte, HeaderSize+h.Len)
	copy(m.Bytes, hdr)
	if _, err := io.ReadFull(c, m.Bytes[HeaderSize:]); err != nil {
		m.Close()
		return Message{}, fmt.Errorf("handoff: receive body: %w", err)
	}
	return m, nil
}

func parseRights(oob []byte) ([]int, error) {
	msgs, err := unix.ParseSocketControlMessage(oob)
	if err != nil {
		return nil, fmt.Errorf("handoff: control message: %w", err)
	}
	var fds []int
	for i := range msgs {
		f, err := unix.ParseUnixRights(&msgs[i])
		if err != nil {
			continue // not SCM_RIGHTS
		}
		fds = append(fds, f...)
	}
	return fds, nil
}

// WriteAck answers one message.
func WriteAck(c *net.UnixConn, adopted bool) error {
	b := []byte{AckRefused}
	if adopted {
		b[0] = AckAdopted
	}
	if _, err := c.Write(b); err != nil {
		return fmt.Errorf("handoff: ack: %w", err)
	}
	return nil
}

// ReadAck reads the answer to one message.
func ReadAck(c *net.UnixConn) (adopted bool, err error) {
	var b [1]byte
	if _, err := io.ReadFull(c, b[:]); err != nil {
		return false, fmt.Errorf("handoff: ack: %w", err)
	}
	switch b[0] {
	case AckAdopted:
		return true, nil
	case AckRefused:
		return false, nil
	}
	return false, fmt.Errorf("handoff: ack byte %#x", b[0])
}
