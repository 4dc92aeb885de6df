//! Unit tests of the parent module.

use super::*;

const IDLE: Duration = Duration::from_secs(60);

fn anon() -> Principal {
    Principal::Anonymous
}

#[test]
fn sessions_per_principal_are_bounded() {
    let sessions = SessionTable::with_per_principal(SessionKey::random(), 100, 2, IDLE);
    let (a, b) = (Principal::user("a", &[], &[]), Principal::user("b", &[], &[]));
    let now = Instant::now();
    let (first, _) = sessions.create_at("2025-06-18", &a, now).unwrap();
    sessions.create_at("2025-06-18", &a, now).unwrap();
    let e = sessions.create_at("2025-06-18", &a, now).err().expect("over the bound");
    assert_eq!(e.to_jsonrpc().0, http::StatusCode::TOO_MANY_REQUESTS);
    assert!(sessions.create_at("2025-06-18", &b, now).is_ok(), "another principal is unaffected");
    for _ in 0..5 {
        sessions.create_at("2025-06-18", &anon(), now).unwrap();
    }
    sessions.end(&first, &a).unwrap();
    assert!(sessions.create_at("2025-06-18", &a, now).is_ok(), "an ended session frees its place");
    // Idle sessions of the principal are evicted to make room.
    assert!(sessions.create_at("2025-06-18", &a, now + IDLE * 2).is_ok());
}

#[test]
fn a_session_belongs_to_its_creator() {
    let sessions = SessionTable::new(SessionKey::random(), 10, IDLE);
    let alice = Principal::user("alice", &[], &[]);
    let (token, _) = sessions.create("2025-11-25", &alice).unwrap();
    assert!(sessions.resolve(&token, &alice).is_ok());
    for other in [Principal::user("bob", &[], &[]), Principal::Anonymous] {
        assert_eq!(sessions.resolve(&token, &other).err().unwrap().to_jsonrpc().0, 404);
        assert_eq!(sessions.end(&token, &other).err().unwrap().to_jsonrpc().0, 404);
    }
    assert!(sessions.end(&token, &alice).is_ok());
}

#[test]
fn sessions_are_bounded_and_idle_ones_make_room() {
    let t0 = Instant::now();
    let at = |s: u64| t0 + Duration::from_secs(s);
    let sessions = SessionTable::new(SessionKey::random(), 2, IDLE);
    let (a, _) = sessions.create_at("2025-11-25", &anon(), at(0)).unwrap();
    let (b, _) = sessions.create_at("2025-06-18", &anon(), at(30)).unwrap();
    let full = sessions.create_at("2025-11-25", &anon(), at(30)).err().unwrap();
    assert_eq!(full.to_jsonrpc().0, 429);
    // At 61 s `a` has been idle past the limit; `b` has not.
    let (c, _) = sessions.create_at("2025-11-25", &anon(), at(61)).unwrap();
    assert_eq!(sessions.len(), 2);
    // The evicted session's id is now refused, so its client initializes again.
    assert_eq!(sessions.resolve_at(&a, &anon(), at(61)).err().unwrap().to_jsonrpc().0, 404);
    assert_eq!(sessions.resolve_at(&b, &anon(), at(61)).unwrap().version, "2025-06-18");
    assert!(sessions.resolve_at(&c, &anon(), at(61)).is_ok());
}

#[test]
fn activity_keeps_a_session_and_the_sweep_evicts_the_quiet() {
    let t0 = Instant::now();
    let at = |s: u64| t0 + Duration::from_secs(s);
    let sessions = SessionTable::new(SessionKey::random(), 10, IDLE);
    let (busy, _) = sessions.create_at("2025-11-25", &anon(), at(0)).unwrap();
    let (quiet, _) = sessions.create_at("2025-11-25", &anon(), at(0)).unwrap();
    for s in [40, 80, 120] {
        sessions.resolve_at(&busy, &anon(), at(s)).unwrap();
    }
    assert_eq!(sessions.sweep_at(at(120)), 1);
    assert!(sessions.resolve_at(&busy, &anon(), at(120)).is_ok());
    assert!(sessions.resolve_at(&quiet, &anon(), at(120)).is_err());
}

#[test]
fn deleted_and_forged_ids_are_404_and_foreign_valid_ids_are_adopted() {
    let key = SessionKey::derive(b"shared");
    let here = SessionTable::new(key.clone(), 10, IDLE);
    let (token, _) = here.create("2025-11-25", &anon()).unwrap();
    here.end(&token, &anon()).unwrap();
    assert!(here.resolve(&token, &anon()).is_err());
    assert!(here.end(&token, &anon()).is_err());
    assert!(here.resolve("forged", &anon()).is_err());
    // A replica sharing the secret accepts an id it never minted.
    let (other, _) = SessionTable::new(key, 10, IDLE).create("2025-06-18", &anon()).unwrap();
    assert_eq!(here.resolve(&other, &anon()).unwrap().version, "2025-06-18");
}

#[test]
fn tombstones_are_bounded() {
    let mut t = Tombstones::default();
    for i in 0..100u8 {
        t.insert([i; 16], 10);
    }
    assert_eq!((t.order.len(), t.set.len()), (10, 10));
    assert!(t.set.contains(&[99; 16]) && !t.set.contains(&[0; 16]));
}
