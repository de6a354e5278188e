package console

import (
	"fmt"
	"net/http"
	"slices"
	"strings"

	"github.com/waybill/waybill/auth"
	"github.com/waybill/waybill/projection"
)

// checks is a group of checkboxes of a form: the values chosen of an
// input that takes several.
type checks struct {
	// Name is the inputs' name: the field's name in the API.
	Name, Legend, Hint string
	Options            []option
	Problems           []string
}

// resend asks which of the targets of the message's current generation to
// send it to again, all of them chosen at first, and why; then sends it
// again as a new generation (POST /messages/{id}/resend).
func (c *Console) resend(w http.ResponseWriter, r *http.Request, s *auth.Session) error {
	m, err := c.loadMessage(r)
	if err != nil {
		return err
	}
	targets := m.CurrentTargets()
	chosen := targets
	if r.Method == http.MethodPost {
		chosen = r.PostForm["targets"]
	}
	box := checks{Name: "targets", Legend: fmt.Sprintf("Targets of generation %d", m.Generation),
		Hint: "Each target chosen gets a new delivery and receives the payload again."}
	for _, t := range targets {
		box.Options = append(box.Options, option{Value: t, Label: fmt.Sprintf("%s (%s)", t, strings.ToLower(currentDelivery(m, t).State.Label())),
			Selected: slices.Contains(chosen, t)})
	}
	if len(targets) == 0 {
		box.Hint = fmt.Sprintf("Generation %d has no target: replay the message to match the routes afresh.", m.Generation)
	}
	reason := reasonField(r)
	v := confirmView{
		Question: fmt.Sprintf("Send message %s again?", m.ID),
		Explanation: fmt.Sprintf("It goes out again as generation %d: a new delivery to each target you choose. %s",
			m.Generation+1, supersedeText(m)),
		Button:  "Resend",
		Danger:  true,
		Back:    "/ui/messages/" + m.ID.String(),
		Version: m.Version,
		Checks:  []checks{box},
		Fields:  []field{reason},
	}
	return c.confirm(w, r, "Resend", v, func() (string, error) {
		a, err := messageAction(r, s, reason.Value)
		if err != nil {
			return "", err
		}
		if len(chosen) == 0 {
			// The Writer reads no targets as all of them: a form with
			// every box cleared means none, which is no resend.
			return "", invalidField("targets", fmt.Sprintf("choose at least one: generation %d went to %s", m.Generation, targetList(targets)))
		}
		after, err := c.cfg.Writer.Resend(r.Context(), m.ID, chosen, a)
		if err != nil {
			return "", err
		}
		c.log.Info("message resent", "message_id", m.ID, "operator", s.Name, "version", after.Version,
			"generation", after.Generation, "targets", chosen, "via", "console")
		return fmt.Sprintf("Sent again as generation %d, to %s.", after.Generation, targetList(after.CurrentTargets())), nil
	})
}

// replay asks why, then sends the message again as a new generation to the
// targets the routes match now (POST /messages/{id}/replay).
func (c *Console) replay(w http.ResponseWriter, r *http.Request, s *auth.Session) error {
	m, err := c.loadMessage(r)
	if err != nil {
		return err
	}
	reason := reasonField(r)
	v := confirmView{
		Question: fmt.Sprintf("Replay message %s?", m.ID),
		Explanation: fmt.Sprintf("It goes out again as generation %d, to the targets the routes match now: they are decided afresh "+
			"when you confirm, as at its dispatch, and may differ from generation %d's (%s). If no route matches it, the new "+
			"generation has no delivery and the message is not routed. %s",
			m.Generation+1, m.Generation, targetList(m.CurrentTargets()), supersedeText(m)),
		Button:  "Replay",
		Danger:  true,
		Back:    "/ui/messages/" + m.ID.String(),
		Version: m.Version,
		Fields:  []field{reason},
	}
	return c.confirm(w, r, "Replay", v, func() (string, error) {
		a, err := messageAction(r, s, reason.Value)
		if err != nil {
			return "", err
		}
		after, err := c.cfg.Writer.Replay(r.Context(), m.ID, a)
		if err != nil {
			return "", err
		}
		targets := after.CurrentTargets()
		c.log.Info("message replayed", "message_id", m.ID, "operator", s.Name, "version", after.Version,
			"generation", after.Generation, "targets", targets, "via", "console")
		if len(targets) == 0 {
			return fmt.Sprintf("Replayed as generation %d: no route matches it now, so it is not routed.", after.Generation), nil
		}
		return fmt.Sprintf("Replayed as generation %d, to %s.", after.Generation, targetList(targets)), nil
	})
}

// supersedeText says what a new generation does to the current one.
func supersedeText(m *projection.Message) string {
	return fmt.Sprintf("Of generation %d, the deliveries that failed or stalled become superseded; those delivered or skipped stay as they were.",
		m.Generation)
}

// currentDelivery is the current generation's delivery to target.
func currentDelivery(m *projection.Message, target string) projection.Delivery {
	for _, d := range m.Deliveries {
		if d.Target == target && m.Current(&d) {
			return d
		}
	}
	return projection.Delivery{}
}

// targetList names targets for a sentence.
func targetList(targets []string) string {
	if len(targets) == 0 {
		return "no target"
	}
	return strings.Join(targets, ", ")
}

// loadMessage is the message the path names.
func (c *Console) loadMessage(r *http.Request) (*projection.Message, error) {
	id, err := pathID(r, "id")
	if err != nil {
		return nil, err
	}
	return projection.Load(r.Context(), c.cfg.DB, id)
}
