import FoodBackendAPI
import FoodBackendClient
import Foundation

/// A coach invites by mail; the client opens the link, signs up, accepts and has `client`; the coach
/// hears it live and reads the client's week; a second invitation is resent, revoked and removed.
func aCoachInvitesAndTheClientAccepts() async throws {
    let coach = try await signUp("coach", verified: true)
    _ = try await coach.app.send { try await $0.postV1AuthRolesCoach().ok.body.json }
    try await coach.app.refreshSession()
    try await expect(await coach.app.currentSession?.roles.contains("coach") == true, "the coach role in the token")
    let stream = try await StreamReader(coach.app)
    defer { stream.close() }

    let clientEmail = uniqueEmail("client")
    let invited = try await coach.app.send {
        try await $0.postV1Clients(body: .json(.init(email: clientEmail, name: "Swift Client", notes: "met at the gym"))).created.body.json
    }
    let mail = try await mails(to: clientEmail).last!
    let code = try capture("/invite\\?code=([A-Za-z0-9_-]{20,})", in: mail)
    let page = try await text(try await newApp().send { try await $0.getInvite(query: .init(code: code)).ok.body.html })
    try expect(page.lowercased().contains("invited"), "the invitation's page")

    let client = try await {
        let app = newApp()
        let signIn = try await app.signUp(email: clientEmail, password: "swift journey client password")
        let user = AppUser(app: app, email: clientEmail, password: "swift journey client password", id: signIn.user.id)
        try await verifyFromTheMail(user)
        return user
    }()
    let preview = try await step("the invitation's preview (code \(code))") {
        try await client.app.send { try await $0.getV1InvitationsCode(path: .init(code: code)).ok.body.json }
    }
    _ = preview
    // The app lists the invitations to the account's proven address; each comes with a fresh code
    // (the mailed one is replaced), which the app accepts with.
    let mine = try await step("the client's invitations") { try await client.app.send { try await $0.getV1InvitationsMine().ok.body.json } }
    try expect(mine.items.count == 1, "one invitation waits: \(mine)")
    _ = try await step("the acceptance") {
        try await client.app.send { try await $0.postV1InvitationsCodeAccept(path: .init(code: mine.items[0].code)).ok.body.json }
    }
    let accepted = try await stream.next("client_accepted") { event -> LiveEvent.ClientAccepted? in
        if case .clientAccepted(let accepted) = event.kind { return accepted }
        return nil
    }
    try expect(same(accepted.clientId, client.id) && same(accepted.coachId, coach.id), "the acceptance names both: \(accepted)")
    try await client.app.refreshSession()
    try await expect(await client.app.currentSession?.roles.contains("client") == true, "the client role in the token")
    let myCoach = try await client.app.send { try await $0.getV1Coach().ok.body.json }
    _ = myCoach

    // The coach's roster, one client's card and an edit of its notes.
    let roster = try await coach.app.send { try await $0.getV1Clients().ok.body.json }
    try expect(roster.items.contains { $0.id == invited.id }, "the client on the roster")
    _ = try await coach.app.send { try await $0.getV1ClientsId(path: .init(id: invited.id)).ok.body.json }
    _ = try await coach.app.send { try await $0.patchV1ClientsId(path: .init(id: invited.id), body: .json(.init(notes: "prefers mornings"))).ok.body.json }

    // The client logs a meal, a weight and a ketone reading; the coach reads them and the week's trend.
    _ = try await client.app.send {
        try await $0.putV1NutritionProfile(body: .json(.init(dailyCalorieGoal: 2000, diet: .balanced, timeZone: "UTC", weightUnit: .kg))).ok.body.json
    }
    let meal = try await client.app.send {
        try await $0.postV1Meals(
            body: .json(
                .init(
                    eatenAt: Date().addingTimeInterval(-600), items: [.init(calories: 260, carbsG: 56, fatG: 1, grams: 200, name: "Rice", proteinG: 5)],
                    name: "Journey lunch"))
        ).created.body.json
    }
    _ = try await client.app.send { try await $0.postV1MealsIdConsume(path: .init(id: meal.id)).ok.body.json }
    _ = try await client.app.send { try await $0.postV1MetricsWeight(body: .json(.init(unit: .kg, value: 71.2))).created.body.json }
    _ = try await client.app.send { try await $0.postV1MetricsKetones(body: .json(.init(mmolPerL: 1.2))).created.body.json }
    let week = try await eventually("the coach's view of the client's week") {
        try? await coach.app.send {
            try await $0.getV1NutritionClientsClientUserIdTrends(path: .init(clientUserId: client.id), query: .init(period: ._7d)).ok.body.json
        }
    }
    try expect(week.days.count == 7 && week.days.compactMap(\.calories).reduce(0, +) == 260, "the week's calories: \(week.days)")
    let meals = try await coach.app.send { try await $0.getV1NutritionClientsClientUserIdMeals(path: .init(clientUserId: client.id)).ok.body.json }
    try expect(meals.items.contains { $0.id == meal.id }, "the coach sees the meal")
    _ = try await coach.app.send { try await $0.getV1NutritionClientsClientUserIdMetricsWeight(path: .init(clientUserId: client.id)).ok.body.json }
    _ = try await coach.app.send { try await $0.getV1NutritionClientsClientUserIdMetricsKetones(path: .init(clientUserId: client.id)).ok.body.json }

    // A second invitation, resent, revoked, then removed from the roster; the mail's unsubscribe link.
    let secondEmail = uniqueEmail("second-client")
    let second = try await coach.app.send { try await $0.postV1Clients(body: .json(.init(email: secondEmail, name: "Second Client"))).created.body.json }
    _ = try await coach.app.send { try await $0.postV1ClientsIdInvitationResend(path: .init(id: second.id)).ok.body.json }
    _ = try await coach.app.send { try await $0.postV1ClientsIdInvitationRevoke(path: .init(id: second.id)).ok.body.json }
    _ = try await coach.app.send { try await $0.deleteV1ClientsId(path: .init(id: second.id)).noContent }
    let secondMail = try await mails(to: secondEmail).last!
    let unsubscribe = try capture("unsubscribe\\?token=([A-Za-z0-9_.-]+)", in: secondMail)
    _ = try await text(try await newApp().send { try await $0.getV1InvitationsUnsubscribe(query: .init(token: unsubscribe)).ok.body.html })
    _ = try await newApp().send {
        try await $0.postV1InvitationsUnsubscribe(query: .init(token: unsubscribe), body: .urlEncodedForm(.init(listUnsubscribe: .oneClick))).ok.body.json
    }

    // The client leaves the coach.
    _ = try await client.app.send { try await $0.deleteV1Coach().noContent }
}
