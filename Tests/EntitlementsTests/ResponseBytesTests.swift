import Foundation
@testable import Entitlements
import Models
import Testing
import TestSupport

/// Answers byte for byte: unset fields written as `null`, keys sorted, whatever writes them.
@Suite struct EntitlementsResponseBytesTests {
    @Test func anEntitlementAndTheTiersAreWrittenWithTheirNulls() async throws {
        try await EntitlementsTestEnvironment.run { env in
            let user = try await env.user()
            let me = try await env.call(.get, "/v1/entitlements/me", as: user)
            let token = try #require(me.json["app_account_token"] as? String)
            #expect(
                me.text
                    == #"{"app_account_token":"\#(token)","billing_issue":false,"expires_at":null,"#
                    + #""features":{"ai_suggestions":false,"cloud_sync":false,"collaboration":false,"meal_analysis":true},"is_sandbox":false,"#
                    + #""limits":{"meal_analyses_per_day":{"limit":3,"used":0},"sources":{"limit":50,"used":0}},"source":"free","state":"active","tier":"free","#
                    + #""will_renew":null}"#)
            // An unlimited cap is a `null`, not a missing key.
            let tiers = try await env.call(.get, "/v1/tiers", as: user)
            #expect(
                tiers.text
                    == #"{"items":[{"features":["meal_analysis"],"id":"free","limits":{"meal_analyses_per_day":3,"sources":50},"name":"Free","price_text":"Free","products":[]},"#
                    + #"{"features":["ai_suggestions","cloud_sync","meal_analysis"],"id":"academic","limits":{"meal_analyses_per_day":100,"sources":null},"#
                    + #""name":"Academic","price_text":"$9.99/month","#
                    + #""products":["com.researchapp.academic.monthly"]},{"features":["ai_suggestions","cloud_sync","meal_analysis"],"id":"pro","#
                    + #""limits":{"meal_analyses_per_day":100,"sources":null},"#
                    + #""name":"Pro","price_text":"$14.99/month","products":["com.researchapp.pro.monthly","com.researchapp.pro.yearly"]},"#
                    + #"{"features":["ai_suggestions","cloud_sync","collaboration","meal_analysis"],"id":"team","limits":{"meal_analyses_per_day":100,"sources":null},"name":"Team","#
                    + #""price_text":"$49.99/month","products":["com.researchapp.team.monthly"]}]}"#)
        }
    }
}
