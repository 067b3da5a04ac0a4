import Foundation
@testable import Invitations
import Models
import Testing
import TestSupport

/// Answers byte for byte: unset fields written as `null`, keys sorted, whatever writes them.
@Suite struct InvitationsResponseBytesTests {
    @Test func aClientAndItsPreviewAreWrittenWithTheirNulls() async throws {
        try await InvitationsTestEnvironment.run { env in
            let coach = try await env.coach("Sam Strong")
            let email = "\(TestEnvironment.uniqueName("ana"))@example.com"
            let (created, code) = try await env.invite("Ana Lima", email: email, by: coach)
            let id = try #require(created.json["id"] as? String)
            let client = try await env.call(.get, "/v1/clients/\(id)", as: coach)
            let json = client.json
            let invitation = try #require(json["invitation"] as? [String: Any])
            let (createdAt, updatedAt) = (try #require(json["created_at"] as? String), try #require(json["updated_at"] as? String))
            let (sentAt, expiresAt) = (try #require(invitation["sent_at"] as? String), try #require(invitation["expires_at"] as? String))
            let delivery = try #require(invitation["delivery"] as? String)
            #expect(
                client.text
                    == #"{"accepted_at":null,"accepted_via_relay":false,"created_at":"\#(createdAt)","email":"\#(email)","id":"\#(id)","#
                    + #""invitation":{"accepted_at":null,"delivery":"\#(delivery)","expires_at":"\#(expiresAt)","resend_count":0,"sent_at":"\#(sentAt)","status":"pending"},"#
                    + #""last_sign_in_at":null,"left_at":null,"name":"Ana Lima","notes":null,"phone":null,"status":"pending","updated_at":"\#(updatedAt)"}"#)

            let preview = try await env.call(.get, "/v1/invitations/\(code)")
            #expect(
                preview.text
                    == #"{"client_name":"Ana Lima","coach":{"avatar_url":null,"display_name":"Sam Strong","id":"\#(coach.path)"},"expires_at":"\#(expiresAt)","status":"pending"}"#)
            let ana = try await env.user("Ana", email: email)
            let auth = env.actAsAuth(granting: ana)
            #expect(try await env.call(.post, "/v1/invitations/\(code)/accept", as: ana).status == .ok)
            try await auth.value
            let afterwards = try await env.call(.get, "/v1/invitations/\(code)")
            #expect(
                afterwards.text
                    == #"{"client_name":null,"coach":{"avatar_url":null,"display_name":"Sam Strong","id":"\#(coach.path)"},"expires_at":"\#(expiresAt)","status":"accepted"}"#)
        }
    }
}
