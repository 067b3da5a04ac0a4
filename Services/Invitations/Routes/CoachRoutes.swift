import Foundation
import Hummingbird
import ServiceKit

/// A client's side of the link: who their coach is, and leaving them.
struct CoachRoutes {
    let invitations: Invitations

    func add(to router: Router<ServiceRequestContext>) {
        let coach = router.group("v1/coach", context: AuthenticatedContext.self)
        coach.get(use: current)
        coach.delete(use: leave)
    }

    struct CoachResponse: ResponseEncodable {
        var coach: InvitationRoutes.CoachCard
        var since: Date
    }

    static let noCoach = APIError(.notFound, code: "no_coach", detail: "You have no coach.")

    @Sendable func current(_ request: Request, context: AuthenticatedContext) async throws -> CoachResponse {
        let invitations = self.invitations
        let found = try await invitations.postgres.withConnectionOnItsLoop { connection -> (ClientRecord, AccountRecord?)? in
            guard let client = try await invitations.clients.linked(to: context.caller.userID, on: connection, logger: context.logger) else { return nil }
            return (client, try await invitations.accounts.find(client.coachID, on: connection, logger: context.logger))
        }
        guard let (client, coach) = found else { throw Self.noCoach }
        return CoachResponse(coach: InvitationRoutes.CoachCard(id: client.coachID, account: coach), since: client.acceptedAt ?? client.createdAt)
    }

    /// Leaves the coach: the roster shows `left`, and auth takes `client` away (`client.unlinked`).
    @Sendable func leave(_ request: Request, context: AuthenticatedContext) async throws -> HTTPResponse.Status {
        let invitations = self.invitations
        try await invitations.postgres.transaction(logger: context.logger) { connection in
            guard let client = try await invitations.clients.linked(to: context.caller.userID, forUpdate: true, on: connection, logger: context.logger) else {
                throw Self.noCoach
            }
            try await invitations.unlink(client, reason: .left, on: connection, logger: context.logger)
        }
        return .noContent
    }
}

extension CoachRoutes.CoachResponse: Codable {}
