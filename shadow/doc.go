// Package shadow compares two DNS servers question by question: the DNS a
// cluster runs now (a, the reference) and dnsd beside it (b), before the
// cluster is switched over. Compare is pure: it classes every difference
// between two responses to one question (rcode, missing record, extra
// record, TTL only, order only); Ask is the edge that sends the questions.
// Questions come from a list (ParseQuestions) or from the record keys in
// etcd (FromKeys). It must not change either server or etcd.
package shadow
