import FoodBackendAPI
import FoodBackendClient
import Foundation
import OpenAPIRuntime

/// Seed 003's flow: sign up with a display name, verify from the mail, edit the profile, read it.
func aNewUserVerifiesEditsTheProfileAndReadsIt() async throws {
    let app = newApp()
    let email = uniqueEmail("seed003")
    let password = "swift journey seed003 password"
    var sessions = await app.sessions.makeAsyncIterator()
    try await expect(await sessions.next() == .some(nil), "signed out at first")
    let signIn = try await app.signUp(email: email, password: password, displayName: "Ada Cook")
    try expect(signIn.user.displayName == "Ada Cook" && !signIn.user.emailVerified, "the new account: \(signIn.user)")
    try await expect(await sessions.next()??.userID == signIn.user.id, "the session stream says who signed in")
    try await expectProblem("email_taken", "a second sign-up with the address") {
        try await newApp().signUp(email: email, password: "another long password")
    }

    // A second verification mail, as a user who lost the first would ask; either link works.
    do {
        _ = try await app.send { try await $0.postV1AuthEmailVerifyResend().accepted }
        _ = try await mails(to: email, subject: "Confirm", count: 2)
    } catch let error as FoodBackendError where error.code == .rateLimited {
        // Too soon after the first: the app says when to ask again (error.retryAfter).
    }
    let user = AppUser(app: app, email: email, password: password, id: signIn.user.id)
    try await verifyFromTheMail(user)
    let me = try await app.send { try await $0.getV1AuthMe().ok.body.json }
    try expect(me.emailVerified && me.email == email, "auth/me after verification: \(me)")
    // A ticket for a web view's EventSource, which cannot send the token (the app's own stream does).
    let ticket = try await app.send { try await $0.postV1EventsTicket().ok.body.json }
    try expect(!ticket.ticket.isEmpty && ticket.expiresAt > Date(), "the event stream's ticket: \(ticket)")

    // The profile is made from the sign-up's event: it appears a moment later.
    let profile = try await eventually("the profile made at sign-up") {
        try? await app.send { try await $0.getV1ProfilesMe().ok.body.json }
    }
    try expect(profile.displayName == "Ada Cook", "the profile's name is the sign-up's: \(profile)")
    let username = "ada_\(UUID().uuidString.prefix(8).lowercased())"
    let updated = try await app.send {
        try await $0.patchV1ProfilesMe(
            body: .json(
                .init(
                    allergies: [.init(name: "peanuts", severity: .severe)], bio: "Cooks on Sundays.",
                    cookingPreferences: .init(equipment: ["oven"], skillLevel: .intermediate, timeBudgetMinutes: 45),
                    dietaryPreferences: [.keto], displayName: "Ada L. Cook", favoriteCuisines: ["italian"], username: username))
        ).ok.body.json
    }
    try expect(updated.displayName == "Ada L. Cook", "the patched profile: \(updated)")
    let read = try await app.send { try await $0.getV1ProfilesMe().ok.body.json }
    try expect(
        read.displayName == "Ada L. Cook" && read.bio == "Cooks on Sundays." && read.username == username
            && read.dietaryPreferences == [.keto] && read.allergies?.first?.name == "peanuts" && read.favoriteCuisines == ["italian"],
        "the profile read back: \(read)")

    // The onboarding checklist, an avatar from the photo's bytes, and the public views of the profile.
    let onboarding = try await app.send { try await $0.getV1ProfilesMeOnboarding().ok.body.json }
    _ = onboarding
    _ = try await app.send { try await $0.postV1ProfilesMeOnboardingStepSkip(path: .init(step: .avatar)).ok.body.json }
    let withAvatar = try await app.uploadAvatar(onePixelPNG)
    try expect(withAvatar.avatarUrl != nil, "the avatar's URL after the upload")
    let image = try await app.send { try await $0.getV1ProfilesIdAvatar(path: .init(id: signIn.user.id)).ok.body }
    switch image {
    case .png(let bytes): try expect(try await Data(collecting: bytes, upTo: 1 << 20).starts(with: [0x89, 0x50]), "a PNG back")
    default: throw JourneyFailure(description: "the avatar came back as another type: \(image)")
    }
    _ = try await app.send { try await $0.deleteV1ProfilesMeAvatar().noContent }
    let other = try await signUp("seed003-reader")
    let byName = try await eventually("the profile found by its username") {
        try? await other.app.send { try await $0.getV1ProfilesByUsernameUsername(path: .init(username: username)).ok.body.json }
    }
    try expect(byName.id.lowercased() == signIn.user.id.lowercased(), "by username: \(byName)")
    let found = try await other.app.send { try await $0.getV1ProfilesSearch(query: .init(q: "Ada L")).ok.body.json }
    _ = found
    _ = try await app.send { try await $0.getV1ProfilesMeWarnings().ok.body.json }

    // A second device signs in; the first sees both sessions and ends the second's.
    let phone = newApp()
    try await phone.signIn(email: email, password: password)
    let list = try await app.send { try await $0.getV1AuthSessions().ok.body.json }
    try expect((list.items ?? []).count >= 2, "two sessions: \(list)")
    let phoneSession = try await phone.currentSession?.sessionID
    let ended = try await app.send { try await $0.deleteV1AuthSessionsId(path: .init(id: phoneSession ?? "")).noContent }
    _ = ended
    // The phone's next call fails once its token's session is gone, at the latest at the refresh.
    await phone.refreshSessionIgnoringError()
    try await expect(await phone.currentSession == nil, "the ended session's device is signed out after its refresh fails")

    // A password change, a forgotten password reset from the mail, and a sign-in with the new one.
    _ = try await app.send {
        try await $0.postV1AuthPasswordChange(body: .json(.init(currentPassword: password, password: "swift journey changed password"))).noContent
    }
    _ = try await app.send { try await $0.postV1AuthPasswordForgot(body: .json(.init(email: email))).accepted }
    let resetMail = try await eventually("the reset mail") {
        try await mails(to: email).last(where: { $0.contains("reset-password?token=") })
    }
    let resetToken = try capture("reset-password\\?token=([A-Za-z0-9_-]+)", in: resetMail)
    _ = try await app.send { try await $0.postV1AuthPasswordReset(body: .json(.init(password: "swift journey reset password", token: resetToken))).noContent }
    try await expectProblem("invalid_credentials", "the old password") { try await newApp().signIn(email: email, password: password) }
    let again = newApp()
    try await again.signIn(email: email, password: "swift journey reset password")
    await again.signOut()
    try await expect(await again.currentSession == nil, "signed out")
}

/// Verifying and resetting in the mail's pages, as someone without the app would, then the app signs in.
func theMailsPagesConfirmTheAddressAndResetThePassword() async throws {
    let user = try await signUp("pages")
    let pages = newApp()
    let verifyMail = try await mails(to: user.email, subject: "Confirm").last!
    let token = try capture("verify-email\\?token=([A-Za-z0-9_-]+)", in: verifyMail)
    let page = try await text(try await pages.send { try await $0.getVerifyEmail(query: .init(token: token)).ok.body.html })
    try expect(page.contains("<form"), "the verification page asks for the password")
    let confirmed = try await text(
        try await pages.send { try await $0.postVerifyEmail(body: .urlEncodedForm(.init(password: user.password, token: token))).ok.body.html })
    try expect(confirmed.lowercased().contains("confirmed"), "the page says the address is confirmed")

    _ = try await pages.send { try await $0.postV1AuthPasswordForgot(body: .json(.init(email: user.email))).accepted }
    let resetMail = try await eventually("the reset mail") {
        try await mails(to: user.email).last(where: { $0.contains("reset-password?token=") })
    }
    let resetToken = try capture("reset-password\\?token=([A-Za-z0-9_-]+)", in: resetMail)
    _ = try await text(try await pages.send { try await $0.getResetPassword(query: .init(token: resetToken)).ok.body.html })
    _ = try await text(
        try await pages.send {
            try await $0.postResetPassword(
                body: .urlEncodedForm(.init(password: "swift page reset password", passwordConfirmation: "swift page reset password", token: resetToken))
            ).ok.body.html
        })
    let signIn = try await newApp().signIn(email: user.email, password: "swift page reset password")
    try expect(signIn.user.emailVerified, "verified in the page: \(signIn.user)")
}

/// Apple and Google sign-in as far as a stack without their keys goes: the nonce, and a refused token.
func providerSignInAsksForANonceAndRefusesAForeignToken() async throws {
    let app = newApp()
    let nonce = try await app.signInNonce()
    try expect(nonce.sha256.count == 64 && nonce.expiresAt > Date(), "a nonce: \(nonce)")
    for attempt in [
        { _ = try await app.signInWithApple(idToken: "not.a.token", nonce: nonce, givenName: "Ada", familyName: "Cook") },
        { _ = try await app.signInWithGoogle(idToken: "not.a.token", nonce: nonce) },
    ] as [() async throws -> Void] {
        do {
            try await attempt()
            throw JourneyFailure(description: "a made-up ID token signed in")
        } catch let error as FoodBackendError {
            try expect(["invalid_id_token", "provider_not_configured", "provider_unavailable"].contains(error.rawCode), "refused: \(error)")
        }
    }
    try await expect(await app.currentSession == nil, "still signed out")
}

/// What the server publishes for anyone: health, the API document, its keys and the app links.
func thePublicDocumentsDecode() async throws {
    let app = newApp()
    _ = try await app.send { try await $0.getHealthz().ok }
    _ = try await app.send { try await $0.getOpenapi_json().ok.body.json }
    let keys = try await app.send { try await $0.getWellKnownJwks_json().ok.body.json }
    try expect(!(keys.keys ?? []).isEmpty, "JWKS has a key")
    // The app links are served only where the apps' ids are configured: otherwise 404 not_found.
    do {
        _ = try await app.send { try await $0.getWellKnownAppleAppSiteAssociation().ok }
    } catch let error as FoodBackendError where error.code == .notFound {}
    do {
        _ = try await app.send { try await $0.getWellKnownAssetlinks_json().ok }
    } catch let error as FoodBackendError where error.code == .notFound {}
}

/// The account is deleted from the app; its tokens stop working.
func anAccountIsDeletedFromTheApp() async throws {
    let user = try await signUp("deleted")
    _ = try await user.app.send { try await $0.deleteV1AuthAccount(body: .json(.init(password: user.password))).accepted }
    await user.app.forgetSession()
    try await expectProblem("invalid_credentials", "signing in to the deleted account") {
        try await newApp().signIn(email: user.email, password: user.password)
    }
}

extension FoodBackend {
    /// For a call whose failure the journey expects and checks otherwise.
    func refreshSessionIgnoringError() async { try? await refreshSession() }
}
