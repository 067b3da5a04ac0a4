import Foundation
import Hummingbird

/// Optimistic concurrency for resources that can be edited: the resource's answers carry an `ETag`
/// naming its version, and an edit sent with `If-Match` of a version that is no longer current is
/// `412 precondition_failed` (RFC 9110 §13.1.1), so two devices editing at once do not overwrite
/// each other unseen. Without `If-Match` the edit applies, as before.
public struct EntityTag: Sendable, Equatable, CustomStringConvertible {
    /// The tag without its quotes.
    package let opaque: String

    public init(version: Int64) { opaque = String(version) }

    /// A version kept as a timestamp (`updated_at`): its microseconds, as PostgreSQL stores them.
    public init(updatedAt: Date) { self.init(version: Int64((updatedAt.timeIntervalSince1970 * 1_000_000).rounded())) }

    /// The header's value: a strong tag.
    public var description: String { "\"\(opaque)\"" }

    /// Whether the request's `If-Match` names a version: a tag, not `*` (any version at all).
    public static func namesAVersion(ifMatchOf request: Request) -> Bool {
        members(ifMatchOf: request).contains { $0 != "*" }
    }

    /// Throws `412 precondition_failed` unless the request has no `If-Match`, has `*` alone, or lists
    /// this tag. Weak tags (`W/"…"`) never match: `If-Match` compares strongly. `*` stands only alone
    /// (RFC 9110 §13.1.1: `"*" / #entity-tag`): beside tags it would let a stale tag pass where a
    /// route asks for the version the client saw.
    public func check(ifMatchOf request: Request) throws {
        guard !request.headers[values: .ifMatch].isEmpty else { return }
        let tags = Self.members(ifMatchOf: request)
        if (!tags.isEmpty && tags.allSatisfy { $0 == "*" }) || tags.contains(description) { return }
        throw preconditionFailed
    }

    /// The answer to an `If-Match` this tag does not pass: `412`, with the current tag.
    public var preconditionFailed: APIError {
        APIError(
            .preconditionFailed, code: "precondition_failed",
            detail: "The resource changed since the version in If-Match; read it again and retry.", headers: [.eTag: description])
    }

    /// `check(ifMatchOf:)` for a statement that reads the version itself: nil when any version passes
    /// (no `If-Match`, or `*` alone), else the versions the request's tags name (none for tags that
    /// are not a version's), one of which the current version must be.
    public static func versions(ifMatchOf request: Request) -> [Int64]? {
        guard !request.headers[values: .ifMatch].isEmpty else { return nil }
        let tags = members(ifMatchOf: request)
        if !tags.isEmpty && tags.allSatisfy({ $0 == "*" }) { return nil }
        return tags.compactMap { tag in
            guard tag.count > 2, tag.first == "\"", tag.last == "\"" else { return nil }
            let version = tag.dropFirst().dropLast()
            // Only the form `init(version:)` writes: `"007"` or `"+7"` is another tag.
            guard let number = Int64(version), String(number) == version else { return nil }
            return number
        }
    }

    private static func members(ifMatchOf request: Request) -> [String] {
        request.headers[values: .ifMatch].flatMap { $0.split(separator: ",") }.map { $0.trimmingCharacters(in: .whitespaces) }
    }
}
