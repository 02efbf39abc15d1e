package quota

// Override is an optional limit, in units per minute.
type Override struct {
	Limit int64
	Set   bool
}

// Overridden returns an Override of limit.
func Overridden(limit int64) Override { return Override{Limit: limit, Set: true} }

// Source says where an effective limit came from.
type Source string

// The sources of an effective limit.
const (
	SourceDefault     Source = "default"
	SourceProducer    Source = "producer_override"
	SourceConsumer    Source = "consumer_override"
	SourceBoth        Source = "producer_and_consumer_override"
	SourceUnavailable Source = "" // no limit resolved
)

// EffectiveLimit returns the limit of one (metric, consumer) pair and where
// it came from, from the metric's default limit and the producer's and the
// consumer's overrides, by the table in the package documentation:
// no override ⇒ def; producer only ⇒ producer; consumer only ⇒
// min(consumer, def); both ⇒ min(producer, consumer).
func EffectiveLimit(def int64, producer, consumer Override) (int64, Source) {
	switch {
	case producer.Set && consumer.Set:
		return min(producer.Limit, consumer.Limit), SourceBoth
	case producer.Set:
		return producer.Limit, SourceProducer
	case consumer.Set:
		return min(consumer.Limit, def), SourceConsumer
	default:
		return def, SourceDefault
	}
}
