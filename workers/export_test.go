package workers

// RecordTimeout bounds one try at recording an outcome.
const RecordTimeout = recordTimeout
