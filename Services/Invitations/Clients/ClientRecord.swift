import Foundation
import Hummingbird
import ServiceKit

/// A client of a coach with its invitation, as stored.
struct ClientRecord: Sendable {
    enum Status: String, Sendable, CaseIterable {
        case pending, accepted, expired, revoked, left
    }

    var id: UUID
    var coachID: UUID
    var name: String?
    var email: String?
    var phone: String?
    var notes: String?
    var createdAt: Date
    var updatedAt: Date
    var invitationID: UUID
    /// As stored: `pending`, `accepted`, `revoked` or `left` (`expired` is worked out).
    var storedStatus: String
    var sentAt: Date
    var expiresAt: Date
    var resendCount: Int
    var acceptedAt: Date?
    var leftAt: Date?
    var clientUserID: UUID?
    var acceptedViaRelay: Bool
    /// `queued`, `sent`, `failed` or `suppressed`, from the mail outbox and the unsubscribed addresses.
    var delivery: String
    var lastSignInAt: Date?

    var status: Status {
        if storedStatus == "pending" { return expiresAt <= Date() ? .expired : .pending }
        return Status(rawValue: storedStatus) ?? .revoked
    }
}

/// The roster's sort key: newest first.
struct RosterCursor: Codable, Sendable {
    var createdAt: Date
    var id: UUID
    enum CodingKeys: String, CodingKey { case createdAt = "c", id = "i" }
}

/// A client as the coach sees it.
struct ClientView: Codable, Sendable {
    struct Invitation: Codable, Sendable {
        var status: String
        var sentAt: Date
        var expiresAt: Date
        var resendCount: Int
        var delivery: String
        @Nullable var acceptedAt: Date?

        enum CodingKeys: String, CodingKey {
            case acceptedAt = "accepted_at", delivery, expiresAt = "expires_at", resendCount = "resend_count", sentAt = "sent_at", status
        }
    }

    // Every field present, `null` when unset: a client's shape does not change with its state.
    var id: UUID
    @Nullable var name: String?
    @Nullable var email: String?
    @Nullable var phone: String?
    @Nullable var notes: String?
    var status: String
    var createdAt: Date
    var updatedAt: Date
    @Nullable var acceptedAt: Date?
    @Nullable var leftAt: Date?
    @Nullable var lastSignInAt: Date?
    var acceptedViaRelay: Bool
    var invitation: Invitation

    init(_ client: ClientRecord) {
        id = client.id
        name = client.name
        email = client.email
        phone = client.phone
        notes = client.notes
        status = client.status.rawValue
        createdAt = client.createdAt
        updatedAt = client.updatedAt
        acceptedAt = client.acceptedAt
        leftAt = client.leftAt
        lastSignInAt = client.status == .accepted ? client.lastSignInAt : nil
        acceptedViaRelay = client.acceptedViaRelay
        invitation = Invitation(
            status: client.status.rawValue, sentAt: client.sentAt, expiresAt: client.expiresAt, resendCount: client.resendCount, delivery: client.delivery,
            acceptedAt: client.acceptedAt)
    }

    enum CodingKeys: String, CodingKey {
        case acceptedAt = "accepted_at", acceptedViaRelay = "accepted_via_relay", createdAt = "created_at", email, id, invitation
        case lastSignInAt = "last_sign_in_at", leftAt = "left_at", name, notes, phone, status, updatedAt = "updated_at"
    }
}

extension ClientView: ResponseEncodable {}
